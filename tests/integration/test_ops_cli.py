"""`bench ops` and `peak` end to end on debug-llama: one JSON record, rows at the model's
shapes with the closed-form counts, every fraction of roofline in (0, 1], the profile written."""
import json

import pytest

from conftest import assert_user_error, run_cli
from llmdissect.perfmodel import op_costs as opc
from llmdissect.specs.models import get_model


@pytest.mark.slow
def test_peak_then_ops_rows(db_path, tmp_path):
    proc = run_cli("peak", "--quick", "--min-time", "0", "--db", str(db_path), "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak = json.loads(proc.stdout)
    cpu = peak["metrics"]["devices"]["cpu"]
    assert peak["kind"] == "ops" and peak["config"]["what"] == "peak" and peak["status"] == "ok"
    assert cpu["peak_flops_per_s"]["fp32"] > 1e8 and cpu["memory_bandwidth_bytes_per_s"] > 1e8
    profile = json.loads((tmp_path / "state" / "calibration.json").read_text())
    assert profile["cpu"]["peak_flops_per_s"]["fp32"] == cpu["peak_flops_per_s"]["fp32"]
    if peak["metrics"]["threads"] > 1:  # the grid again with one thread, for one-thread servers
        one, grid = profile["cpu"]["gemm_efficiency_by_shape_one_thread"], profile["cpu"]["gemm_efficiency_by_shape"]
        assert [one[a] for a in ("dtype", "rows", "k", "n")] == [grid[a] for a in ("dtype", "rows", "k", "n")]
        assert one["peak_flops_per_s"] == pytest.approx(cpu["peak_flops_per_s"]["fp32"] / peak["metrics"]["threads"])
        assert all(0 < v <= 1 for plane in one["efficiency"] for row in plane for v in row)

    T = 32
    proc = run_cli("bench", "ops", "--model", "debug-llama", "--tokens", str(T), "--min-time", "0", "--seqs", "16,32",
                   "--threads", "1", "--db", str(db_path), "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.strip().splitlines()) == 1
    rec = json.loads(proc.stdout)
    assert rec["kind"] == "ops" and rec["status"] == "ok" and rec["config"]["pass"] == "both"
    rows = rec["metrics"]["rows"]
    for r in rows:
        assert 0 < r["peak_fraction"] <= 1, r
        assert r["time_s"]["n"] >= 5 and r["time_s"]["median"] > 0
        assert r["intensity"] == pytest.approx(r["flops"] / r["bytes"])
    s = get_model("debug-llama")
    by = {(r["op"], r["pass"], r["shape"]): r for r in rows}
    gate = next(r for r in rows if r["op"] == "gate_proj" and r["pass"] == "bwd")
    assert (gate["flops"], gate["bytes"]) == (opc.linear(T, s.hidden_size, s.intermediate_size, 4, "bwd").flops,
                                              opc.linear(T, s.hidden_size, s.intermediate_size, 4, "bwd").bytes)
    head = next(r for r in rows if r["op"] == "lm_head" and r["pass"] == "fwd")
    assert head["flops"] == 2 * T * s.hidden_size * s.vocab_size
    ops = {r["op"] for r in rows}
    assert {"attention eager", "attention math", "attention flash", "rmsnorm", "rope", "silu x gate", "softmax",
            "embedding", "cross-entropy", "adamw step", "nf4 matmul (bnb)", "int8 matmul (torchao weight-only)"} <= ops
    att = [r for r in rows if r["op"] == "attention flash" and r["pass"] == "fwd"]
    assert sorted(r["shape"] for r in att) == ["b1 s32 h4/2 d16", "b2 s16 h4/2 d16"]
    assert att[0]["flops"] == opc.attention(2, 16, 4, 2, 16, 4, "fwd").flops
    assert rec["metrics"]["ceilings"]["source"].startswith("calibration profile")
    eff = json.loads((tmp_path / "state" / "calibration.json").read_text())["efficiency"]
    assert set(eff) == {"gemm", "attention", "memory"} and all(0 < v <= 1 for v in eff.values())
    assert len(by) == len(rows)  # one row per (op, pass, shape)


@pytest.mark.parametrize("args,fragment", [
    (["--pass", "sideways"], "--pass must be"), (["--tokens", "0"], "--tokens"), (["--seqs", "a,b"], "--seqs"),
    (["--model", "nope"], "unknown model"), (["--seqs", "4096"], "longer than"), (["--dtype", "fp8"], "--dtype")])
def test_ops_bad_input(db_path, args, fragment):
    assert_user_error(run_cli("bench", "ops", "--model", "debug-llama", *args, "--db", str(db_path), timeout=60),
                      fragment)


def test_peak_and_calibrate_bad_input(db_path):
    assert_user_error(run_cli("peak", "--device", "cuda:7", "--db", str(db_path), timeout=60), "not visible")
    assert_user_error(run_cli("peak", "--min-time", "-1", "--db", str(db_path), timeout=60), "--min-time")
    assert_user_error(run_cli("calibrate", "--model", "nope", "--db", str(db_path), timeout=60), "unknown model")
