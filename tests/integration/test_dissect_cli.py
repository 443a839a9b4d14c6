"""`dissect` end to end on debug-llama: shares of a step add to 1, the trace is Chrome/Perfetto
JSON, the profiled step is compared with untraced ones, and bad input exits 2."""
import json

import pytest

from conftest import assert_user_error, run_cli

CATEGORIES = {"embedding", "attention projections", "attention core", "MLP", "norms", "output head", "loss",
              "optimizer", "communication", "other"}


@pytest.mark.slow
def test_dissect_pretrain_shares_and_trace(db_path, tmp_path):
    trace = tmp_path / "step.json"
    proc = run_cli("dissect", "pretrain", "--model", "debug-llama", "--seq", "32", "--warmup", "1",
                   "--profile-steps", "2", "--threads", "1", "--trace", str(trace), "--db", str(db_path), "--json",
                   timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    m = rec["metrics"]
    assert rec["kind"] == "ops" and rec["config"]["what"] == "dissect" and rec["config"]["workload"] == "pretrain"
    assert set(m["modules_share"]) == CATEGORIES
    assert sum(m["modules_share"].values()) == pytest.approx(1, abs=1e-9)
    for step in m["per_step"]:
        assert sum(step["modules_share"].values()) == pytest.approx(1, abs=1e-9)
        # every second of the step is attributed (phase edges are a few microseconds apart)
        assert step["attributed_s"] == pytest.approx(step["step_s"], rel=0.02)
        assert sum(step["phases_s"].values()) == pytest.approx(step["step_s"], rel=0.02)
    for key in ("embedding", "attention projections", "attention core", "MLP", "norms", "output head", "loss",
                "optimizer"):
        assert m["modules_s"][key] > 0, key
    assert m["phases_s"]["forward"] > 0 and m["phases_s"]["backward"] > 0 and m["phases_s"]["communication"] == 0
    assert len(m["untraced_steps_s"]) == 2 and m["profiling_overhead"] == pytest.approx(
        m["profiled_step_s"] / m["untraced_step_s"] - 1)
    assert m["top_ops"][0]["self_s"] >= m["top_ops"][-1]["self_s"] > 0
    data = json.loads(trace.read_text())
    names = {e.get("name") for e in data["traceEvents"]}
    assert {"phase:forward", "phase:backward", "phase:optimizer"} <= names
    assert any(str(n).startswith("mod:MLP:") for n in names)
    assert all("ph" in e for e in data["traceEvents"])  # Chrome trace event format


@pytest.mark.slow
def test_dissect_infer_prefill_and_decode(db_path):
    proc = run_cli("dissect", "infer", "--model", "debug-llama", "--input-len", "16", "--output-len", "4",
                   "--profile-steps", "1", "--threads", "1", "--db", str(db_path), "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout)["metrics"]
    assert m["phases_s"]["prefill"] > 0 and m["phases_s"]["decode"] > 0
    assert sum(m["modules_share"].values()) == pytest.approx(1, abs=1e-9)
    assert m["modules_s"]["loss"] == 0 and m["modules_s"]["optimizer"] == 0
    for step in m["per_step"]:
        assert step["attributed_s"] == pytest.approx(step["step_s"], rel=0.02)  # nothing counted twice
    assert m["modules_s"]["MLP"] > 0 and m["modules_s"]["attention core"] > 0


@pytest.mark.slow
def test_dissect_expert_parallel_moe_step_has_its_all_to_alls_as_communication(db_path, tmp_path):
    trace = tmp_path / "ep.json"
    proc = run_cli("dissect", "pretrain", "--model", "tiny-moe", "--seq", "32", "--micro-batch", "2", "--warmup", "1",
                   "--profile-steps", "1", "--nproc", "2", "--ep", "2", "--trace", str(trace), "--db", str(db_path),
                   "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    m = rec["metrics"]
    assert rec["config"]["ep"] == 2 and rec["config"]["nproc"] == 2
    assert set(m["modules_share"]) == CATEGORIES | {"router", "experts"}  # tiny-moe has no shared experts
    for step in m["per_step"]:
        # rank 0's step: the collectives it waited in are moved out of the modules that called them, once
        assert step["attributed_s"] == pytest.approx(step["step_s"], rel=0.02)
        assert sum(step["phases_s"].values()) == pytest.approx(step["step_s"], rel=0.02)
    # the dispatch and combine all-to-alls (and DDP's all-reduce) are on the step's path
    assert m["modules_s"]["communication"] > 0 and m["modules_s"]["experts"] > 0 and m["modules_s"]["router"] > 0
    assert trace.exists()  # rank 0 writes it; the other rank does not race it


@pytest.mark.parametrize("args,fragment", [
    (["pretrain", "--trace", "/nonexistent/dir/t.json"], "--trace"),
    (["pretrain", "--profile-steps", "0"], "--profile-steps"),
    (["pretrain", "--seq", "100000"], "--seq"),
    (["finetune", "--method", "dora"], "--method"),
    (["infer", "--input-len", "500", "--output-len", "100"], "max_position_embeddings")])
def test_dissect_bad_input(db_path, args, fragment):
    assert_user_error(run_cli("dissect", *args[:1], "--model", "debug-llama", *args[1:], "--db", str(db_path),
                              timeout=60), fragment)
