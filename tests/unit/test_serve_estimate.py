"""`estimate serve`: the simulation on the step-time model, its record, and validate's pairing."""
from __future__ import annotations

import json
import math

import pytest

import llmdissect.metric_names as mn
from conftest import assert_user_error, run_cli
from llmdissect.analysis.serve_estimate import estimate_measured_serve, run_serve_estimate
from llmdissect.analysis.validate import validate_records
from llmdissect.errors import UserError
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.request import estimate_request
from llmdissect.perfmodel.servestep import IterationTime
from llmdissect.results.schema import RunRecord
from llmdissect.specs import get_model, resolve_platform


def test_one_request_takes_the_step_models_prefill_then_its_decodes():
    est = run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="a100", num_prompts=1,
                                              input_len=256, output_len=4))
    m = get_model("llama2-7b")
    step = IterationTime(m, machine_for(resolve_platform("a100"), "bf16", {}), 2, 1, wt.layer_read_bytes(m, "none", 2))
    prefill = step(256, 0, 256 * 256 / 2, 256, 1, 1)
    decodes = [step(1, 256 + i, 0.0, 0, 1, 1) for i in range(3)]
    got = est.metrics
    assert got[mn.TTFT_S]["median"] == pytest.approx(prefill)
    assert got[mn.E2E_LATENCY_S]["median"] == pytest.approx(prefill + sum(decodes))
    assert got[mn.TPOT_S]["median"] == pytest.approx(sum(decodes) / 3)
    assert got["completed"] == 1 and got["engine"]["iterations"] == 4
    assert est.config["profile"]["name"] == "vllm" and est.config["kind_estimated"] == mn.SERVE


def test_more_load_queues_and_the_slo_counts_goodput():
    common = dict(model="llama2-7b", hardware="a100", num_prompts=60, input_len=512, output_len=64,
                  slo="ttft=0.2,tpot=0.05")
    light = run_serve_estimate(estimate_request("serve", request_rate=1.0, **common)).metrics
    burst = run_serve_estimate(estimate_request("serve", request_rate=math.inf, **common)).metrics
    assert burst[mn.TTFT_S]["p90"] > light[mn.TTFT_S]["p90"]
    assert burst[mn.REQUEST_THROUGHPUT_PER_S] > light[mn.REQUEST_THROUGHPUT_PER_S]
    assert light[mn.GOODPUT_PER_S] == pytest.approx(light[mn.REQUEST_THROUGHPUT_PER_S])
    assert burst["slo_attainment"] < 1.0


def test_replicas_split_the_load():
    one = run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="8xa100", gpus=2, tp=2,
                                              num_prompts=40, output_len=32)).metrics
    two = run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="8xa100", gpus=2, replicas=2,
                                              num_prompts=40, output_len=32)).metrics
    assert one["completed"] == two["completed"] == 40
    with pytest.raises(Exception, match="do not split"):
        run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="a100", replicas=2))


def _measured(config_extra: dict) -> RunRecord:
    offsets = [0.0, 0.1, 0.2, 0.3]
    config = {"base_url": "http://127.0.0.1:1", "num_prompts": 4, "input_len": 128, "output_len": 16,
              "request_rate": 10.0, "burstiness": 1.0, "max_concurrency": None, "arrivals": None, "seed": 0,
              "slo": {}, **config_extra}
    metrics = {mn.TTFT_S: {"median": 0.05}, mn.TPOT_S: {"median": 0.012}, mn.REQUEST_THROUGHPUT_PER_S: 3.5,
               "send_offsets_s": offsets}
    return RunRecord(kind=mn.SERVE, source="measured", config=config, metrics=metrics).finish("ok")


def test_validate_pairs_a_serve_run_with_the_simulation_of_its_load():
    served = {"model": "llama2-7b", "hardware": "a100", "engine": "vllm"}
    record = _measured({"served": served})
    v = validate_records([record], [])
    assert {p.metric for p in v.pairs} == {mn.SERVE_TTFT_P50_S, mn.SERVE_TPOT_P50_S, mn.REQUEST_THROUGHPUT_PER_S}
    est = estimate_measured_serve(record.config, record.metrics)
    assert est.metrics["send_offsets_s"] == [0.0, 0.1, 0.2, 0.3]  # the run's own send times
    assert v.computed and v.computed[0].env["validates"] == record.id
    unnamed = validate_records([_measured({})], [])
    assert not unnamed.pairs and "which model, hardware and engine" in unnamed.unpaired[0][2]


def test_cli_prints_stores_and_refuses_what_does_not_apply(db_path):
    out = json.loads(run_cli("estimate", "serve", "--model", "llama2-7b", "--hardware", "h100", "--profile",
                             "vllm-large", "--num-prompts", "20", "--request-rate", "5", "--db", str(db_path),
                             "--json", check=True).stdout)
    assert out["source"] == "estimated" and out["config"]["kind_estimated"] == "serve"
    assert out["metrics"]["completed"] == 20 and out["metrics"][mn.TTFT_S]["median"] > 0
    assert_user_error(run_cli("estimate", "serve", "--model", "llama2-7b", "--hardware", "a100", "--batch", "4"),
                      "--batch does not apply")
    assert_user_error(run_cli("estimate", "serve", "--model", "llama2-7b", "--hardware", "a100", "--profile", "tgi"),
                      "unknown scheduler profile")
    assert_user_error(run_cli("estimate", "pretrain", "--model", "llama2-7b", "--hardware", "a100",
                              "--request-rate", "3"), "--request-rate does not apply")
    assert_user_error(run_cli("estimate", "serve", "--model", "llama2-70b", "--hardware", "rtx4090"),
                      "no memory for a KV cache")


def test_advise_serve_finds_the_highest_rate_within_the_slo():
    from llmdissect.analysis.serve_advise import PRECISION, _meets, advise_serve, search_split, splits

    assert splits(8) == [(8, 1), (4, 2), (2, 4), (1, 8)] and splits(6) == [(6, 1), (3, 2)]
    options = {"model": "llama2-7b", "hardware": "a100", "gpus": 2, "num_prompts": 60, "input_len": 256,
               "output_len": 32, "slo": "ttft=0.3,tpot=0.03"}
    found = search_split(options, 2, 1, 0.9)
    assert found.max_rate_per_s > 0 and _meets(found.metrics, 0.9)
    above = run_serve_estimate(estimate_request("serve", **{**options, "replicas": 2, "num_prompts": 120,
                                                            "request_rate": found.max_rate_per_s * PRECISION ** 2}))
    assert not _meets(above.metrics, 0.9)  # the bracket closed within 2 %
    best = advise_serve(options, 2, 0.9, usd_per_hour=3.6)
    assert [(r.replicas, r.tp) for r in best] in ([(2, 1), (1, 2)], [(1, 2), (2, 1)])
    assert best[0].max_rate_per_s >= best[1].max_rate_per_s
    # 2 devices at 3.6 USD an hour = 0.002 USD a second, over rate x 32 output tokens a second
    assert best[0].usd_per_m_output_tokens == pytest.approx(0.002 / (best[0].max_rate_per_s * 32) * 1e6)


def test_advise_serve_needs_an_slo():
    assert_user_error(run_cli("advise", "serve", "--model", "llama2-7b", "--hardware", "a100"), "needs --slo")
    assert_user_error(run_cli("advise", "serve", "--model", "llama2-7b", "--hardware", "a100", "--slo", "ttft=1",
                              "--attainment", "1.5"), "--attainment must be in")


def test_the_report_draws_the_simulation_beside_runs_that_name_their_server():
    from llmdissect.report.sections_infer import _simulated, serving

    served = {"model": "llama2-7b", "hardware": "a100", "engine": "vllm"}
    runs = [_measured({"served": served, "request_rate": rate}) for rate in (2.0, 8.0)]
    series = _simulated(runs)
    assert set(series) == {"TTFT p50 simulated", "TPOT p50 simulated"}
    assert len(series["TTFT p50 simulated"][0]) == 2 and all(v > 0 for v in series["TPOT p50 simulated"][1])
    assert _simulated([_measured({})]) == {}
    assert serving(runs) is not None


def test_a_cpu_server_of_one_thread_gets_its_share_of_the_peak_and_the_one_thread_bandwidth():
    from llmdissect.analysis.serve_estimate import _cpu_threads_machine

    profile = {"cpu": {"peak_flops_per_s": {"fp32": 2e11}, "memory_bandwidth_bytes_per_s": 4e10, "threads": 4,
                       "memory_bandwidth_one_thread_bytes_per_s": 1.5e10}}
    mach = machine_for(resolve_platform("cpu"), "fp32", profile)
    notes: list[str] = []
    one = _cpu_threads_machine(mach, profile, 1, notes, "fp32").ceilings
    assert one.peak_flops_per_s == pytest.approx(5e10) and one.memory_bandwidth_bytes_per_s == 1.5e10
    two = _cpu_threads_machine(mach, profile, 2, [], "fp32").ceilings  # no measurement at 2 threads: the share
    assert two.peak_flops_per_s == pytest.approx(1e11) and two.memory_bandwidth_bytes_per_s == pytest.approx(2e10)
    assert _cpu_threads_machine(mach, profile, 4, [], "fp32") is mach and "one thread" in notes[0]


def test_a_one_thread_server_prices_its_gemms_at_the_grid_peak_measured_with_one_thread():
    from llmdissect.analysis.serve_estimate import _cpu_threads_machine
    from llmdissect.perfmodel.roofline import gemm_time_s

    def grid(eff):
        return {"dtype": "fp32", "rows": [1, 64], "k": [128, 2048], "n": [128, 2048],
                "efficiency": [[[eff[0]] * 2] * 2, [[eff[1]] * 2] * 2]}

    # all threads: 1 row at 2 % of 2e11, 64 rows at 80 %; one thread of two: 1 row at 4 % of
    # its share (1e11, the same rate: torch ran it on one thread either way), 64 rows at 90 %
    profile = {"cpu": {"peak_flops_per_s": {"fp32": 2e11}, "memory_bandwidth_bytes_per_s": 4e12, "threads": 2,
                       "gemm_efficiency_by_shape": grid((0.02, 0.8)),
                       "gemm_efficiency_by_shape_one_thread": grid((0.04, 0.9))}}
    mach = machine_for(resolve_platform("cpu"), "fp32", profile)
    notes: list[str] = []
    one = _cpu_threads_machine(mach, profile, 1, notes, "fp32").ceilings
    flops = 2 * 1 * 512 * 512
    assert gemm_time_s(one, flops, 0, (1, 512, 512)) == pytest.approx(flops / (0.04 * 1e11))
    assert gemm_time_s(mach.ceilings, flops, 0, (1, 512, 512)) == pytest.approx(flops / (0.02 * 2e11))
    big = 2 * 64 * 512 * 512
    assert gemm_time_s(one, big, 0, (64, 512, 512)) == pytest.approx(big / (0.9 * 1e11))
    assert "grid peak measured with one thread" in notes[0]
    # a profile without it: the all-thread grid at the thread's share, as before
    del profile["cpu"]["gemm_efficiency_by_shape_one_thread"]
    old = _cpu_threads_machine(machine_for(resolve_platform("cpu"), "fp32", profile), profile, 1, [], "fp32")
    assert gemm_time_s(old.ceilings, flops, 0, (1, 512, 512)) == pytest.approx(flops / (0.02 * 1e11))


def test_a_trace_sets_each_requests_time_lengths_and_shared_blocks():
    from llmdissect.analysis.serve_estimate import trace_requests
    from llmdissect.workloads.serve.traces import TraceRow

    rows = [TraceRow(10.0, 1200, 0, (1, 2, 3)), TraceRow(10.5, 1100, 7, (1, 2, 9)), TraceRow(12.0, 300, 5, (4,)),
            TraceRow(13.0, 600, 4, (1, 5))]
    reqs = trace_requests(rows, block_tokens=512, time_scale=2.0)
    assert [q.arrival_s for q in reqs] == [0.0, 1.0, 4.0, 6.0]  # (t - first) x time scale
    assert [(q.input_len, q.output_len) for q in reqs] == [(1200, 1), (1100, 7), (300, 5), (600, 4)]  # 0 sent as 1
    # rows 1 and 2 share the run (1, 2): 1024 tokens; row 4 shares only block 1 with them; row 3 shares nothing
    assert (reqs[0].prefix_id, reqs[0].prefix_len) == (reqs[1].prefix_id, 1024)
    assert reqs[3].prefix_len == 512 and reqs[3].prefix_id not in (-1, reqs[0].prefix_id)
    assert (reqs[2].prefix_id, reqs[2].prefix_len) == (-1, 0)


def test_estimate_serve_replays_each_sample_trace_and_refuses_a_rate_beside_it(tmp_path):
    from llmdissect.workloads.serve.traces import SAMPLE_FILES, read_trace

    for fmt, path in SAMPLE_FILES.items():
        _, rows = read_trace(path)
        est = run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="a100", trace=str(path),
                                                  time_scale=0.5))
        assert est.config["trace_format_read"] == fmt and est.metrics["completed"] == len(rows)
        assert est.metrics["send_offsets_s"] == [0.5 * (r.time_s - rows[0].time_s) for r in rows]
        assert est.config["input_len"] == round(sum(max(1, r.input_len) for r in rows) / len(rows))
    mooncake = SAMPLE_FILES["mooncake"]
    assert run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="a100", trace=str(mooncake))
                              ).metrics["engine"][mn.PREFIX_HIT_TOKENS] > 0
    db = tmp_path / "r.db"
    assert_user_error(run_cli("estimate", "serve", "--model", "llama2-7b", "--hardware", "a100", "--trace",
                              str(mooncake), "--request-rate", "3", "--db", str(db)), "does not go with --request-rate")
    assert_user_error(run_cli("estimate", "serve", "--model", "llama2-7b", "--hardware", "a100", "--trace",
                              str(tmp_path / "missing.jsonl"), "--db", str(db)), "cannot read trace")
    assert_user_error(run_cli("estimate", "infer", "--model", "llama2-7b", "--hardware", "a100", "--trace",
                              str(mooncake), "--db", str(db)), "--trace does not apply to `estimate infer`")


def test_a_served_int4_model_streams_its_groups_scales():
    def serve(**kw):
        return run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="a100", quant="int4-weight",
                                                   num_prompts=20, max_concurrency=1, input_len=64, output_len=64,
                                                   **kw))
    g32, g128 = serve(group_size=32), serve()
    # one request at a time: decode streams the weights, a quarter more bytes of them at 32
    assert g32.metrics[mn.TPOT_S]["median"] > g128.metrics[mn.TPOT_S]["median"]
    assert g32.config["group_size"] == 32 and "group_size" not in g128.config
    with pytest.raises(UserError, match="applies to --quant int4-weight"):
        run_serve_estimate(estimate_request("serve", model="llama2-7b", hardware="a100", group_size=32))


def test_the_report_says_at_which_rates_the_simulation_stops_holding():
    from llmdissect.report.sections_infer import SIMULATION_HOLDS, departures

    runs = [_measured({"request_rate": rate}) for rate in (2.0, float("inf"))]  # TTFT 50 ms, TPOT 12 ms
    close = {mn.TTFT_S: {"median": 0.05 * (1 + SIMULATION_HOLDS * 0.9)}, mn.TPOT_S: {"median": 0.0115}}
    far = {mn.TTFT_S: {"median": 0.076}, mn.TPOT_S: {"median": 0.009}}
    found = departures([(runs[0], close), (runs[1], far)], "tiny-llama")
    assert len(found) == 1 and "unbounded (TTFT p50 +52%, TPOT p50 -25%)" in found[0] and "2 req/s" not in found[0]
    assert departures([(runs[0], close)], "tiny-llama") == []


def test_the_engine_costs_from_two_depths_in_closed_form():
    """An engine paying 0.2 ms an iteration and 0.05 ms a layer: 0.3 ms beyond the forward at
    2 layers, 0.5 ms at 6; 8 sequences add 7 x 0.04 ms."""
    from llmdissect.micro.serve_engine import DEEP, MANY, engine_costs

    assert DEEP == 6 and MANY == 8
    out = engine_costs(0.3e-3, 0.3e-3 + 7 * 0.04e-3, 0.5e-3, 2)
    assert out["serve_engine_layer_s"] == pytest.approx(0.05e-3)
    assert out["serve_engine_step_s"] == pytest.approx(0.2e-3)
    assert out["serve_engine_seq_s"] == pytest.approx(0.04e-3)
    # a deeper model that paid less (noise): no negative cost per layer, the whole cost per iteration
    assert engine_costs(0.3e-3, 0.3e-3, 0.2e-3, 2) == {"serve_engine_step_s": pytest.approx(0.3e-3),
                                                        "serve_engine_layer_s": 0.0, "serve_engine_seq_s": 0.0}


def test_an_iteration_pays_the_engine_per_layer():
    profile = {"cpu": {"peak_flops_per_s": {"fp32": 1e11}, "memory_bandwidth_bytes_per_s": 1e10,
                       "op_fixed_s": 1e-5, "serve_engine_step_s": 2e-4, "serve_engine_seq_s": 4e-5}}
    m = get_model("tiny-llama")
    base = IterationTime(m, machine_for(resolve_platform("cpu"), "fp32", profile), 4, 1, 1e6, engine_measured=True)
    profile["cpu"]["serve_engine_layer_s"] = 5e-5
    deep = IterationTime(m, machine_for(resolve_platform("cpu"), "fp32", profile), 4, 1, 1e6, engine_measured=True)
    assert deep(1, 64, 0, 0, 1) - base(1, 64, 0, 0, 1) == pytest.approx(m.num_layers * 5e-5)
