"""`--tp 2`: Megatron-style tensor parallelism (DTensor) on debug-llama with 2 processes,
against a single process on the same global batch; and the shapes TP cannot split."""
import json

import pytest

from conftest import assert_user_error, run_cli

TINY = ["--model", "debug-llama", "--seq", "64", "--steps", "3", "--warmup", "1"]


def bench(db, *args: str) -> dict:
    proc = run_cli("bench", "pretrain", *TINY, *args, "--db", str(db), "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    record = json.loads(proc.stdout)
    assert record["status"] == "ok", record.get("error")
    return record


@pytest.mark.slow
def test_tp2_matches_single_process(db_path):
    single = bench(db_path, "--micro-batch", "2")
    tp = bench(db_path, "--nproc", "2", "--tp", "2", "--micro-batch", "2")
    s, t = single["metrics"], tp["metrics"]
    assert tp["config"]["tp"] == 2 and tp["config"]["dp"] == 1 and single["config"]["tp"] == 1
    assert t["world_size"] == 2 and t["tokens_per_step"] == s["tokens_per_step"] == 2 * 64
    assert all(b < a for a, b in zip(t["loss"], t["loss"][1:])), t["loss"]
    # the same batch and model: TP only splits the matrix multiplies (all-reduce order differs)
    assert t["loss"][0] == pytest.approx(s["loss"][0], rel=1e-5)
    assert t["loss"][-1] == pytest.approx(s["loss"][-1], rel=1e-3)
    assert t["trainable_params"] == s["trainable_params"]
    # each rank holds half of every split projection, so less than the single process
    assert t["static_memory_bytes"] < s["static_memory_bytes"]
    # 2-D: TP 2 inside, FSDP2 over 2 data-parallel groups outside, on the same global batch
    tpdp = bench(db_path, "--nproc", "4", "--tp", "2", "--zero", "2", "--micro-batch", "1")
    assert (tpdp["config"]["tp"], tpdp["config"]["dp"], tpdp["config"]["engine"]) == (2, 2, "fsdp")
    d = tpdp["metrics"]
    assert d["world_size"] == 4 and d["tokens_per_step"] == s["tokens_per_step"]
    assert d["loss"][0] == pytest.approx(s["loss"][0], rel=1e-5)
    assert d["loss"][-1] == pytest.approx(s["loss"][-1], rel=1e-3)


def test_tp_shapes_and_combinations_exit_2(db_path):
    base = ["bench", "pretrain", "--model", "debug-llama", "--db", str(db_path)]
    # debug-llama: 4 heads, 2 kv heads
    assert_user_error(run_cli(*base, "--nproc", "4", "--tp", "4"), "key/value heads (2)")
    assert_user_error(run_cli(*base, "--nproc", "2", "--tp", "2", "--zero", "2"), "no data parallelism")
    assert_user_error(run_cli(*base, "--nproc", "3", "--tp", "3"), "attention heads (4)")
    assert_user_error(run_cli(*base, "--nproc", "3", "--tp", "2"), "must divide the number of processes")
    assert_user_error(run_cli(*base, "--nproc", "4", "--tp", "2", "--zero", "1"), "--zero 2 or 3")
    assert_user_error(run_cli(*base, "--nproc", "2", "--tp", "2", "--engine", "deepspeed"), "DeepSpeed")
    assert not db_path.exists()
