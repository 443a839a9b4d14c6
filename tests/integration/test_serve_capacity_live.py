"""`bench serve --find-max-rate` against a real `transformers serve` of tiny-llama on 127.0.0.1:
the verdict is a rate whose probe met the SLO with a probe above it that did not; bad SLO
strings and unmeetable brackets are one line, exit 2, nothing stored."""
import json

import pytest
from serve_helpers import start_tiny_server

from conftest import assert_user_error, run_cli
from llmdissect.results import open_store

pytestmark = pytest.mark.slow

LOAD = ["--num-prompts", "20", "--input-len", "128", "--output-len", "16"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_tiny_server(tmp_path_factory.mktemp("serve-log"))
    try:
        yield s
    finally:
        s.stop()


def _stored(db):
    if not db.exists():
        return []
    with open_store(db) as store:
        return store.query()


def test_find_max_rate_ends_between_a_passing_and_a_failing_probe(server, tmp_path):
    db = tmp_path / "r.db"
    proc = run_cli("bench", "serve", "--base-url", server.base_url, *LOAD, "--find-max-rate",
                   "--slo", "ttft_p99=0.3,tpot_p99=0.1", "--warmup-requests", "4", "--search-start", "4",
                   "--search-high", "256", "--search-precision", "0.25", "--usd-per-hour", "2", "--json",
                   "--db", str(db), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout)
    search = rec["metrics"]["capacity_search"]
    probes = {p["value"]: p for p in search["probes"]}
    capacity, failing = search["capacity"], search["first_failing"]
    assert rec["metrics"]["capacity_request_rate_per_s"] == capacity < failing
    assert probes[capacity]["passed"] and not probes[failing]["passed"]
    assert probes[capacity]["steady"]["ttft_s_p99"] <= 0.3 and probes[capacity]["steady"]["tpot_s_p99"] <= 0.1
    assert probes[failing]["why"]
    assert search["converged"] == ((failing - capacity) / failing <= 0.25)
    assert all(p["completed"] == 20 for p in search["probes"])  # every probe: the full count
    assert rec["config"]["request_rate"] == capacity and rec["config"]["capacity_search"]["warmup_requests"] == 4
    assert [r.id for r in _stored(db)] == [rec["id"]]
    assert rec["metrics"]["usd_per_million_output_tokens"] > 0  # the passing probe's cost at 2 USD/hour
    # the report's serving section: goodput and the SLO targets against the rate, the capacity, the cost
    out = tmp_path / "report"
    run_cli("report", "--db", str(db), "--out", str(out), "--no-estimate-missing", check=True, timeout=240)
    html = (out / "report.html").read_text()
    assert 'data-section="serving-capacity"' in html and 'data-plot="capacity-goodput-0"' in html
    assert 'data-plot="capacity-slo-0"' in html and "SLO ttft_s_p99 &lt;= 0.3 s" in html
    assert f"{capacity:.4g} requests/s meets" in html and "USD per M output tokens" in html


@pytest.mark.parametrize("args, fragment", [
    (["--find-max-rate", "--slo", "ttft_p99=fast"], "needs a number"),
    (["--find-max-rate", "--slo", "latency_p99=1"], "does not parse"),
    (["--find-max-rate"], "needs --slo"),
    (["--find-max-rate", "--find-max-concurrency", "--slo", "ttft_p99=1"], "one at a time"),
    (["--find-max-rate", "--slo", "ttft_p99=0.0001", "--search-start", "8", "--search-low", "8"],
     "not met even at 8"),
])
def test_bad_searches_are_exit_2_and_store_nothing(server, tmp_path, args, fragment):
    db = tmp_path / "r.db"
    proc = run_cli("bench", "serve", "--base-url", server.base_url, *LOAD, *args, "--db", str(db), timeout=120)
    assert_user_error(proc, fragment)
    assert _stored(db) == []


def test_find_max_concurrency_ends_between_neighbours(server):
    from llmdissect.workloads.serve.capacity import CapacitySearch
    from llmdissect.workloads.serve.capacity_run import capacity_record
    from llmdissect.workloads.serve.serve_config import ServeConfig

    base = ServeConfig(base_url=server.base_url, num_prompts=16, input_len=64, output_len=16,
                       slo={"ttft_s_p99": 0.1})  # p99 TTFT grows about 15 ms per request in flight here
    rec = capacity_record(base, CapacitySearch(over="concurrency", search_start=2, warmup_requests=2))
    search = rec.metrics["capacity_search"]
    probes = {p["value"]: p for p in search["probes"]}
    assert search["converged"] and search["first_failing"] - search["capacity"] == 1
    assert probes[search["capacity"]]["passed"] and not probes[search["first_failing"]]["passed"]
    assert rec.metrics["capacity_concurrency"] == search["capacity"] == rec.config["max_concurrency"]
    assert rec.config["request_rate"] == "inf"
