"""`llmdissect estimate` and `advise` as a user runs them: JSON records, the store, bad input."""
from __future__ import annotations

import json

import pytest

from conftest import assert_user_error, run_cli

BASE = ["estimate", "pretrain", "--model", "llama2-70b", "--hardware", "8xa800"]


def test_estimate_json_is_one_estimated_record_and_is_stored(db_path):
    proc = run_cli(*BASE, "--zero", "3", "--offload", "optimizer", "--recompute", "full", "--seq", "4096",
                   "--json", "--db", str(db_path), check=True)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert (rec["kind"], rec["source"], rec["status"]) == ("estimate", "estimated", "ok")
    c = rec["config"]
    assert c["kind_estimated"] == "pretrain" and c["zero"] == 3 and c["nproc"] == 8 and c["hardware"] == "8xa800"
    for key in ("model", "engine", "offload", "recompute", "attn", "dtype", "optimizer", "micro_batch", "seq",
                "grad_accum", "tp", "pp", "method", "quant"):
        assert key in c
    m = rec["metrics"]
    psi = 68_976_648_192  # llama2-70b parameters
    assert m["memory"]["params_bytes"] == pytest.approx(2 * psi / 8)  # ZeRO-3: bf16 weights partitioned over 8
    assert m["memory"]["optimizer_bytes"] == 0  # offloaded
    assert m["fits"] is True
    assert 0 < m["mfu"] < 1 and m["tokens_per_s"] > 0
    assert set(m["time"]) >= {"step_s", "forward_s", "backward_s", "optimizer_s", "comm_s"}
    assert m["model_flops_per_token"] == 6 * (68_976_648_192 - 32000 * 8192 - 161 * 8192) + 12 * 80 * 8192 * 4096

    listed = run_cli("results", "list", "--db", str(db_path), "--json", check=True)
    assert rec["id"] in listed.stdout


def test_estimate_without_offload_does_not_fit_and_says_by_how_much(db_path):
    proc = run_cli(*BASE, "--zero", "3", "--db", str(db_path), check=True)
    assert "does not fit" in proc.stdout and "GiB over" in proc.stdout
    assert "memory.optimizer_bytes" in proc.stdout


def test_estimate_infer_and_finetune_qlora(db_path):
    inf = json.loads(run_cli("estimate", "infer", "--model", "llama2-7b", "--hardware", "a800", "--batch", "8",
                             "--input-len", "512", "--output-len", "128", "--json", "--db", str(db_path),
                             check=True).stdout)
    assert inf["config"]["kind_estimated"] == "infer"
    t = inf["metrics"]["time"]
    assert 0 < t["tpot_s"] < t["ttft_s"] and inf["metrics"]["memory"]["kv_cache_bytes"] > 0
    sweep = inf["metrics"]["batch_sweep"]
    assert sweep[0]["batch"] == 1 and sweep[-1]["batch"] == inf["metrics"]["max_batch"]
    rates = [r["tokens_per_s"] for r in sweep]
    assert rates == sorted(rates) and [r["tpot_s"] for r in sweep] == sorted(r["tpot_s"] for r in sweep)
    ft = json.loads(run_cli("estimate", "finetune", "--model", "llama2-7b", "--hardware", "rtx4090",
                            "--lora-rank", "16", "--quant", "nf4", "--seq", "1024", "--json", "--db", str(db_path),
                            check=True).stdout)
    assert ft["config"]["method"] == "qlora" and ft["metrics"]["fits"] is True
    assert ft["metrics"]["memory"]["params_bytes"] < 5e9  # a 7B base in NF4 is ~3.9 GB


def test_estimate_cpu_uses_the_calibration_file(tmp_path, db_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"schema": 1, "cpu": {"peak_flops_per_s": {"fp32": 2e11},
                                                   "memory_bandwidth_bytes_per_s": 2e10},
                               "efficiency": {"gemm": 0.5}}))
    args = ["estimate", "pretrain", "--model", "tiny-llama", "--hardware", "cpu", "--seq", "256", "--json",
            "--db", str(db_path)]
    plain = json.loads(run_cli(*args, check=True).stdout)
    assert plain["metrics"]["time"] is None  # no measured peaks: no time guessed
    rec = json.loads(run_cli(*args, "--calibration", str(cal), check=True).stdout)
    assert rec["metrics"]["time"]["step_s"] > 0 and rec["metrics"]["memory"]["total_bytes"] > 0
    assert any("calibration profile" in n for n in rec["metrics"]["notes"])


@pytest.mark.parametrize("args,fragment", [
    (["--zero", "4"], "zero"),
    (["--tp", "3"], "does not divide"),
    (["--seq", "100000"], "longer than"),
    (["--micro-batch", "-2"], "positive"),
    (["--offload", "params", "--zero", "2"], "zero 3"),
])
def test_estimate_bad_input_is_one_line_exit_2(args, fragment, db_path):
    assert_user_error(run_cli(*BASE, *args, "--db", str(db_path)), fragment)


@pytest.mark.parametrize("args,fragment", [
    (["--model", "mixtral-8x7b", "--ep", "3"], "does not divide the 8 experts"),
    (["--model", "llama2-7b", "--ep", "2"], "dense"),
    (["--model", "qwen3-30b-a3b", "--tp", "2", "--ep", "8"], "data-parallel ranks"),
])
def test_estimate_expert_parallel_bad_input_is_one_line_exit_2(args, fragment, db_path):
    assert_user_error(run_cli("estimate", "pretrain", "--hardware", "8xa800", *args, "--db", str(db_path)), fragment)


def test_estimate_unknown_platform_and_model(db_path):
    assert_user_error(run_cli("estimate", "pretrain", "--model", "llama2-7b", "--hardware", "16xnope",
                              "--db", str(db_path)), "unknown hardware")
    assert_user_error(run_cli("estimate", "pretrain", "--model", "gpt5", "--hardware", "a800",
                              "--db", str(db_path)), "unknown model")
    assert_user_error(run_cli("estimate", "infer", "--model", "llama2-7b", "--hardware", "a800", "--zero", "1",
                              "--db", str(db_path)), "does not apply")
    assert_user_error(run_cli("estimate", "train", "--model", "llama2-7b", "--hardware", "a800",
                              "--db", str(db_path)), "unknown estimate kind")


def test_advise_prints_pareto_front_and_json_plan():
    proc = run_cli("advise", "pretrain", "--model", "llama2-7b", "--hardware", "8xa800", "--seq", "2048",
                   "--top", "3", check=True)
    assert "Pareto front" in proc.stdout and "Best for throughput" in proc.stdout
    rec = json.loads(run_cli("advise", "finetune", "--model", "llama2-7b", "--hardware", "rtx4090", "--json",
                             check=True).stdout)
    assert rec["kind"] == "plan" and rec["source"] == "estimated"
    m = rec["metrics"]
    assert m["evaluated"] > 1000 and 0 < m["fitting"] < m["evaluated"]
    assert all(r["fits"] for r in m["front"] + m["top"])
    assert all(not r["fits"] and r["why"] for r in m["dropped_best"])
    thr = [r["tokens_per_s"] for r in m["front"]]
    assert thr == sorted(thr)  # along the front, more memory buys more throughput


def test_advise_bad_input():
    assert_user_error(run_cli("advise", "pretrain", "--model", "llama2-7b", "--hardware", "a800", "--goal", "fun"),
                      "goal")
    assert_user_error(run_cli("advise", "pretrain", "--model", "llama2-7b", "--hardware", "cpu"), "peak")


@pytest.mark.slow
def test_estimated_memory_matches_a_measured_training_run(db_path):
    """End to end: `bench pretrain` measures peak tensor bytes (parameters + optimizer state +
    the live-tensor peak of a step); `estimate` predicts memory.total_bytes for the same config."""
    args = ["--model", "debug-llama", "--seq", "128", "--micro-batch", "2", "--attn", "eager"]
    measured = json.loads(run_cli("bench", "pretrain", *args, "--steps", "1", "--warmup", "1", "--json",
                                  "--db", str(db_path), check=True).stdout)
    est = json.loads(run_cli("estimate", "pretrain", *args, "--hardware", "cpu", "--json", "--db", str(db_path),
                             check=True).stdout)
    for key in ("model", "engine", "zero", "recompute", "attn", "dtype", "micro_batch", "seq", "method"):
        assert est["config"][key] == measured["config"][key], key
    assert est["metrics"]["memory"]["total_bytes"] == pytest.approx(measured["metrics"]["peak_memory_bytes"], rel=0.15)
