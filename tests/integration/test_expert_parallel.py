"""`--ep 2`: a MoE model's routed experts split over 2 processes (gloo all-to-alls), against
plain DDP on the same global batch; what expert parallelism cannot run exits 2 with one line;
validate pairs the measured run with the estimate of the same --ep."""
import json

import pytest

from conftest import assert_user_error, run_cli

TINY = ["--seq", "32", "--steps", "2", "--warmup", "1", "--micro-batch", "2", "--nproc", "2"]


def bench(db, model: str, *args: str) -> dict:
    proc = run_cli("bench", "pretrain", "--model", model, *TINY, *args, "--db", str(db), "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    record = json.loads(proc.stdout)
    assert record["status"] == "ok", record.get("error")
    return record


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny-moe", "tiny-mla"])  # Qwen3-MoE's and DeepSeek-V3's expert modules
def test_ep2_trains_as_ddp_does(db_path, model):
    ddp = bench(db_path, model)
    ep = bench(db_path, model, "--ep", "2")
    d, e = ddp["metrics"], ep["metrics"]
    assert ep["config"]["ep"] == 2 and ddp["config"]["ep"] == 1 and ep["config"]["engine"] == "ddp"
    # the same model, batch and routing: only where each expert runs differs
    assert e["loss"][0] == pytest.approx(d["loss"][0], rel=1e-5)
    assert e["loss"][-1] == pytest.approx(d["loss"][-1], rel=1e-4)
    assert e["trainable_params"] == d["trainable_params"] == ep["metrics"]["total_params"]
    # each rank holds half of the routed experts and their optimizer state
    assert e["static_memory_bytes"] < d["static_memory_bytes"]


@pytest.mark.slow
def test_validate_pairs_an_ep_run_with_the_ep_estimate(db_path):
    from llmdissect.analysis.predict import estimate_measured, estimate_options

    record = bench(db_path, "tiny-moe", "--ep", "2")
    assert estimate_options("pretrain", record["config"])[1]["ep"] == 2
    est = estimate_measured("pretrain", record["config"])
    assert est.config["ep"] == 2  # the all-to-alls and the split experts of the run, predicted
    proc = run_cli("validate", "--db", str(db_path), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pairs = [p for p in json.loads(proc.stdout)["pairs"] if p["record_id"] == record["id"]]
    # (times need this machine's `peak` profile, which a test's fresh home lacks)
    assert "peak_memory_bytes" in {p["metric"] for p in pairs} and pairs[0]["label"].endswith(" ep2"), pairs


def test_what_expert_parallelism_cannot_split_exits_2(db_path):
    base = ["bench", "pretrain", "--seq", "32", "--steps", "1", "--db", str(db_path)]
    assert_user_error(run_cli(*base, "--model", "tiny-moe", "--nproc", "2", "--ep", "3"), "8 experts")
    assert_user_error(run_cli(*base, "--model", "debug-llama", "--nproc", "2", "--ep", "2"), "is dense")
    assert_user_error(run_cli(*base, "--model", "tiny-moe", "--nproc", "2", "--ep", "2", "--zero", "2"), "DDP")
    assert_user_error(run_cli(*base, "--model", "tiny-moe", "--nproc", "3", "--ep", "2"), "data-parallel ranks")
    assert_user_error(run_cli(*base, "--model", "gpt-oss-20b", "--nproc", "2", "--ep", "2"), "not split")
