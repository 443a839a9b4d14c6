"""`--engine deepspeed` on debug-llama with 2 processes over gloo: every ZeRO stage, CPU
offload, the FSDP2 side-by-side, and the --ds-config checks (exit 2, one line)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import assert_user_error, run_cli

TINY = ["--model", "debug-llama", "--seq", "64", "--steps", "3", "--warmup", "1"]
# CI installs deepspeed (Makefile): there a missing deepspeed fails instead of skipping
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None and not os.environ.get("CI"),
                                     reason="deepspeed is not installed (make test installs it)")


def bench(db, *args: str) -> dict:
    proc = run_cli("bench", "pretrain", *TINY, "--nproc", "2", *args, "--db", str(db), "--json", timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    record = json.loads(proc.stdout)
    assert record["status"] == "ok", record.get("error")
    return record


def check_trains(record: dict, zero: int) -> dict:
    m, c = record["metrics"], record["config"]
    assert c["engine"] == "deepspeed" and c["zero"] == zero and c["ds_config"]["zero_optimization"]["stage"] == zero
    assert m["world_size"] == 2 and m["step_time_s"]["n"] == 3 and m["step_time_s"]["median"] > 0
    assert m["tokens_per_s"] == pytest.approx(m["tokens_per_step"] / m["step_time_s"]["median"])
    assert all(b < a for a, b in zip(m["loss"], m["loss"][1:])), m["loss"]  # a fixed batch: falling loss
    assert m["peak_memory_bytes"] > m["static_memory_bytes"] > 0
    assert m["trainable_params"] == m["total_params"]
    # the optimizer state, summed over ranks, covers every parameter once (ZeRO-1/2/3 partition it)
    assert m["optimizer_state_params"] == m["trainable_params"]
    return m


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("zero, args", [
    (1, ["--grad-accum", "2"]),
    (2, ["--dtype", "bf16", "--seq", "32"]),
    (2, ["--offload", "optimizer"]),
    (3, ["--offload", "params"]),
], ids=["zero1-accum2", "zero2-bf16", "zero2-offload-optimizer", "zero3-offload-params"])
def test_deepspeed_zero_stages_train(db_path, tmp_path, zero, args):
    if zero == 1:  # a user's config, merged with what the options require
        user = tmp_path / "ds.json"
        user.write_text(json.dumps({"zero_optimization": {"stage": 1, "overlap_comm": False},
                                    "gradient_clipping": 100.0}))
        args = [*args, "--ds-config", str(user)]
    record = bench(db_path, "--engine", "deepspeed", "--zero", str(zero), *args)
    m = check_trains(record, zero)
    ds = record["config"]["ds_config"]
    if zero == 1:
        assert ds["gradient_clipping"] == 100.0 and ds["zero_optimization"]["overlap_comm"] is False
        assert ds["train_micro_batch_size_per_gpu"] == 1 and record["config"]["ds_config_file"] == str(user)
    assert ds["train_batch_size"] == 2 * ds["gradient_accumulation_steps"]
    if "--grad-accum" in args:
        assert ds["gradient_accumulation_steps"] == 2 and m["tokens_per_step"] == 2 * 2 * 64
    offload = ds["zero_optimization"].get("offload_optimizer")
    if "--offload" in args:
        # DeepSpeedCPUAdam steps the offloaded state; no GPU, so no pinned memory
        assert offload == {"device": "cpu", "pin_memory": False}
        assert "torch_adam" not in ds["optimizer"]["params"]
        assert record["env"]["torch_extensions_dir"]
    else:
        assert offload is None and ds["optimizer"]["params"]["torch_adam"] is True
    assert ds["bf16"]["enabled"] is ("bf16" in args) and ds["fp16"]["enabled"] is False
    if "params" in args:
        assert ds["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": False}


@pytest.mark.slow
@needs_deepspeed
def test_fsdp_and_deepspeed_zero3_side_by_side(db_path):
    fsdp = bench(db_path, "--engine", "fsdp", "--zero", "3")
    ds = bench(db_path, "--engine", "deepspeed", "--zero", "3")
    check_trains(ds, 3)
    f, d = fsdp["metrics"]["loss"], ds["metrics"]["loss"]
    # one seed, one global batch: the same first loss; the same AdamW, so the same second
    assert d[0] == pytest.approx(f[0], rel=1e-5)
    assert d[1] == pytest.approx(f[1], rel=1e-3)
    listed = run_cli("results", "list", "--db", str(db_path), "--json", check=True)
    engines = sorted(r["config"]["engine"] for r in json.loads(listed.stdout))
    assert engines == ["deepspeed", "fsdp"]
    table = run_cli("results", "list", "--db", str(db_path), check=True).stdout
    assert ds["id"][:8] in table and fsdp["id"][:8] in table


@needs_deepspeed  # without it the missing-package check answers first
def test_deepspeed_config_contradictions_exit_2(db_path, tmp_path):
    base = ["bench", "pretrain", *TINY, "--nproc", "2", "--engine", "deepspeed", "--db", str(db_path)]

    def with_file(text: str, *args: str):
        path = tmp_path / "ds.json"
        path.write_text(text)
        return run_cli(*base, "--ds-config", str(path), *args)

    assert_user_error(with_file('{"zero_optimization": {"stage": 3}}', "--zero", "2"),
                      "zero_optimization.stage is 3", "--zero")
    assert_user_error(with_file('{"zero_optimization": {"stage": 7}}'), "unknown ZeRO stage 7")
    assert_user_error(with_file('{"zero_optimization": '), "not valid JSON")
    assert_user_error(with_file('{"bf16": {"enabled": true}}'), "bf16.enabled", "--dtype")
    assert_user_error(with_file('{"train_micro_batch_size_per_gpu": 4}'), "--micro-batch")
    assert_user_error(with_file('{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}',
                                "--zero", "2"), "offload_optimizer.device", "--offload")
    assert_user_error(run_cli(*base, "--ds-config", str(tmp_path / "absent.json")), "not found")
    assert_user_error(run_cli(*base, "--zero", "2", "--offload", "params"), "--zero 3")
    assert_user_error(run_cli(*base, "--offload", "optimizer"), "--zero 1, 2 or 3")
    assert_user_error(run_cli("bench", "pretrain", "--ds-config", "x.json"), "--engine deepspeed")
    assert not db_path.exists()


def test_deepspeed_missing_is_refused():
    code = ("import sys; sys.modules['deepspeed'] = None; sys.argv = ['llmdissect'] + sys.argv[1:]; "
            "from llmdissect.cli.main import run; run()")
    proc = subprocess.run([sys.executable, "-c", code, "bench", "pretrain", "--engine", "deepspeed", "--nproc", "2"],
                          capture_output=True, text=True, timeout=120)
    assert_user_error(proc, "deepspeed", "not installed")
