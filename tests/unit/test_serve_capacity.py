"""The capacity search's bracketing and bisection, SLO targets and presets (no server)."""
import pytest

from llmdissect.errors import UserError
from llmdissect.workloads.serve.capacity import CapacitySearch, Probe, search, steady_check
from llmdissect.workloads.serve.metrics import RequestResult
from llmdissect.workloads.serve.slo import PRESETS, parse_slo

SLO = {"ttft_s_p99": 0.5}


def _runner(capacity):
    calls = []

    def run(v):
        calls.append(v)
        return Probe(v, v <= capacity, {"ttft_s_p99": 0.1 if v <= capacity else 2.0})
    return run, calls


@pytest.mark.parametrize("capacity, start", [(13.7, 1.0), (0.3, 4.0), (100.0, 100.0)])
def test_rate_search_brackets_then_bisects_to_the_precision(capacity, start):
    run, calls = _runner(capacity)
    v = search(CapacitySearch(over="rate", search_start=start, search_precision=0.05), SLO, run)
    assert v["converged"] and v["capacity"] <= capacity < v["first_failing"]
    assert (v["first_failing"] - v["capacity"]) / v["first_failing"] <= 0.05
    assert [p["value"] for p in v["probes"]] == calls and len(set(calls)) == len(calls)
    assert any(p["passed"] and p["value"] == v["capacity"] for p in v["probes"])
    assert any(not p["passed"] and p["value"] == v["first_failing"] for p in v["probes"])


def test_concurrency_search_is_on_whole_numbers():
    run, calls = _runner(11)
    v = search(CapacitySearch(over="concurrency"), SLO, run)
    assert (v["capacity"], v["first_failing"]) == (11, 12)
    assert all(c == int(c) for c in calls)


def test_unmeetable_and_unbounded_brackets_are_user_errors():
    with pytest.raises(UserError, match="not met even at 0.05"):
        search(CapacitySearch(over="rate"), SLO, _runner(0.001)[0])
    with pytest.raises(UserError, match="still met at 8"):
        search(CapacitySearch(over="rate", search_high=8), SLO, _runner(100)[0])
    with pytest.raises(UserError, match="needs --slo"):
        search(CapacitySearch(over="rate"), {}, _runner(1)[0])
    with pytest.raises(UserError, match="no bracket"):
        search(CapacitySearch(over="rate", max_probes=3, search_start=1000), SLO, _runner(1)[0])


def test_max_probes_stops_an_unconverged_search():
    v = search(CapacitySearch(over="rate", max_probes=5, search_precision=0.001), SLO, _runner(5.5)[0])
    assert len(v["probes"]) == 5 and not v["converged"] and v["capacity"] <= 5.5 < v["first_failing"]


def _request(i, ttft, ok=True):
    return RequestResult(i, ok=ok, send_offset_s=i * 0.1, ttft_s=ttft, e2e_s=ttft + 0.5, output_tokens=6)


def test_steady_check_leaves_the_warm_up_out():
    results = [_request(0, 9.0), _request(1, 9.0)] + [_request(i, 0.1) for i in range(2, 12)]
    assert steady_check(results, {"ttft_s_p99": 0.5}, warmup=2)[0]
    passed, steady, why = steady_check(results, {"ttft_s_p99": 0.5}, warmup=1)
    assert not passed and steady["ttft_s_p99"] > 0.5 and "ttft_s p99" in why
    assert steady_check(results, {"tpot_s": 0.09}, warmup=2)[1]["tpot_s"] == pytest.approx(0.1)  # max
    results[5].ok = False
    assert "1 request(s) failed" in steady_check(results, {"ttft_s_p99": 0.5}, warmup=2)[2]
    with pytest.raises(UserError, match="at least 5"):
        steady_check(results[:6], {"ttft_s_p99": 0.5}, warmup=2)


def test_slo_strings_and_presets():
    assert parse_slo("ttft_p99=0.5,tpot_p99=0.05") == {"ttft_s_p99": 0.5, "tpot_s_p99": 0.05}
    assert parse_slo("ttft=0.5,e2e_s_p90=3") == {"ttft_s": 0.5, "e2e_latency_s_p90": 3.0}
    assert parse_slo("MLPerf-Llama2-70b-interactive") == {"ttft_s_p99": 0.45, "tpot_s_p99": 0.04}
    assert PRESETS["mlperf-llama2-70b"] == {"ttft_s_p99": 2.0, "tpot_s_p99": 0.2}
    for bad in ("ttft_p98=1", "ttft_p99", "speed=1", "ttft_p99=-1", "ttft_p99=soon", "mlperf-gpt5"):
        with pytest.raises(UserError) as e:
            parse_slo(bad)
        assert "\n" not in str(e.value)
