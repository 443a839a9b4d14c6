"""Multi-turn sessions, shared prefixes, trace replay and the SLO capacity search against a real
`transformers serve` of tiny-llama on 127.0.0.1 (one server for the module); token counts are
the server's `usage`. Bad traces, SLO strings and unmeetable brackets: one line, exit 2,
nothing stored."""
import asyncio
import json

import pytest
from serve_helpers import start_tiny_server

from conftest import assert_user_error, run_cli
from llmdissect.results import open_store
from llmdissect.workloads.serve.loadgen import ServeConfig, run_async
from llmdissect.workloads.serve.prompts import Tok
from llmdissect.workloads.serve.traces import SAMPLE_FILES, read_trace, trace_offsets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_tiny_server(tmp_path_factory.mktemp("serve-log"))
    try:
        yield s
    finally:
        s.stop()


def _run(server, **kw):
    out = asyncio.run(run_async(ServeConfig(base_url=server.base_url, **kw)))
    assert out.metrics["failed"] == 0, out.metrics["errors"]
    return out


def test_three_turn_sessions_carry_the_whole_history(server):
    tok = Tok(server.folder)
    out = _run(server, num_prompts=2, turns=3, input_len=12, output_len=6, request_rate=20.0, think_time_s=0.05)
    assert len(out.results) == 6 and out.metrics["completed"] == 6
    for s in range(2):
        turns = [r for r in out.results if r.session == s]
        assert [r.turn for r in turns] == [0, 1, 2]
        for prev, r in zip(turns, turns[1:]):
            # the prompt is the previous prompt, the server's answer to it, and a new message
            assert r.sent_prompt["prompt"].startswith(prev.sent_prompt["prompt"] + prev.text)
            assert r.send_offset_s >= prev.send_offset_s + prev.e2e_s + 0.05 - 1e-3  # after answer + think time
        # ...and the server counted the whole of it
        assert [r.prompt_tokens for r in turns] == [tok.count(r.sent_prompt["prompt"]) for r in turns]
        assert turns[0].prompt_tokens == 12
        assert turns[2].prompt_tokens >= turns[1].prompt_tokens + 12 >= turns[0].prompt_tokens + 24
    assert out.metrics["prefix_cache_hit_rate"] is None and out.metrics["prefix_cache_reported"] is False


def test_chat_sessions_send_the_answers_as_assistant_messages(server):
    out = _run(server, endpoint="chat", num_prompts=1, turns=3, input_len=8, output_len=4, shared_prefixes=1,
               prefix_len=16)
    t0, t1, t2 = out.results
    roles = [m["role"] for m in t2.sent_prompt["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in t2.sent_prompt["messages"]][2::2] == [t0.text, t1.text]
    assert t0.prompt_tokens < t1.prompt_tokens < t2.prompt_tokens


def test_shared_prefix_load_sends_exactly_the_fraction(server):
    out = _run(server, num_prompts=10, input_len=12, output_len=2, shared_prefixes=2, prefix_len=24,
               prefix_fraction=0.3, request_rate=50.0, usd_per_hour=3.6)
    m = out.metrics  # 3.6 USD/hour is 0.001 USD a second, charged to each kind of token
    assert m["usd_per_million_output_tokens"] == pytest.approx(0.001 * m["duration_s"] / m["output_tokens"] * 1e6)
    assert m["usd_per_million_input_tokens"] == pytest.approx(0.001 * m["duration_s"] / m["input_tokens"] * 1e6)
    assert ("energy_j" in m) != bool(m.get("energy_not_measured"))  # measured, or the record says why not
    prefixed = [r for r in out.results if r.prefix_id is not None]
    assert len(prefixed) == 3 and {r.prefix_id for r in prefixed} == {0, 1}
    # the server's own token counts: 24 + 12 with a prefix, 12 without
    assert sorted(r.prompt_tokens for r in out.results) == [12] * 7 + [36] * 3
    texts = {r.prefix_id: r.sent_prompt["prompt"][:60] for r in prefixed}
    assert all(r.sent_prompt["prompt"].startswith(texts[r.prefix_id]) for r in prefixed)


@pytest.mark.parametrize("fmt", sorted(SAMPLE_FILES))
def test_trace_samples_replay_with_recorded_gaps_and_lengths(server, fmt):
    _, rows = read_trace(SAMPLE_FILES[fmt])
    out = _run(server, trace=str(SAMPLE_FILES[fmt]), trace_block_tokens=16, time_scale=1.0)
    recorded = trace_offsets(rows, 1.0)
    sent = out.metrics["send_offsets_s"]
    assert len(sent) == len(rows) == 12
    assert max(abs(a - b) for a, b in zip(recorded, sent)) < 0.010  # within 10 ms of the recorded times
    assert [r.prompt_tokens for r in out.results] == [max(r.input_len, 1) for r in rows]
    assert [r.requested_output_len for r in out.results] == [max(r.output_len, 1) for r in rows]
    assert out.config_extra["trace_format_read"] == fmt


def test_malformed_trace_is_exit_2_and_nothing_stored(server, tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n{"timestamp": 5, "input_length": }\n')
    unknown = tmp_path / "t.csv"
    unknown.write_text("when,prompt_tokens,answer_tokens\n0,4,2\n")
    db = tmp_path / "r.db"
    for f, fragment in ((bad, "line 2 is not JSON"), (unknown, "match no known format")):
        proc = run_cli("bench", "serve", "--base-url", server.base_url, "--trace", str(f), "--db", str(db),
                       timeout=60)
        assert_user_error(proc, fragment)
    if db.exists():  # the command may have opened the store; it holds no record
        with open_store(db) as store:
            assert store.query() == []


# --- the capacity search ---

LOAD = ["--num-prompts", "20", "--input-len", "128", "--output-len", "16"]


def _slo_from_one_in_flight(server, input_len, output_len):
    """Three times the p99 TTFT with one request in flight: met at low load, missed when all
    requests arrive at once (their prefills queue), however busy this shared machine is."""
    m = _run(server, num_prompts=6, input_len=input_len, output_len=output_len, max_concurrency=1).metrics
    return round(3 * m["ttft_s"]["p99"], 3)


def _stored(db):
    if not db.exists():
        return []
    with open_store(db) as store:
        return store.query()


def test_find_max_rate_ends_between_a_passing_and_a_failing_probe(server, tmp_path):
    db = tmp_path / "r.db"
    limit = _slo_from_one_in_flight(server, 128, 16)
    proc = run_cli("bench", "serve", "--base-url", server.base_url, *LOAD, "--find-max-rate",
                   "--slo", f"ttft_p99={limit},tpot_p99=1", "--warmup-requests", "4", "--search-start", "4",
                   "--search-precision", "0.25", "--usd-per-hour", "2", "--json", "--db", str(db), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout)
    search = rec["metrics"]["capacity_search"]
    probes = {p["value"]: p for p in search["probes"]}
    capacity, failing = search["capacity"], search["first_failing"]
    assert rec["metrics"]["capacity_request_rate_per_s"] == capacity < failing
    assert probes[capacity]["passed"] and not probes[failing]["passed"]
    assert probes[capacity]["steady"]["ttft_s_p99"] <= limit and probes[capacity]["steady"]["tpot_s_p99"] <= 1
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
    assert 'data-plot="capacity-slo-0"' in html and f"SLO ttft_s_p99 &lt;= {limit:g} s" in html
    assert f"{capacity:.4g} requests/s meets" in html and "USD per M output tokens" in html


@pytest.mark.parametrize("args, fragment", [
    (["--find-max-rate", "--slo", "ttft_p99=fast"], "needs a number"),
    (["--find-max-rate", "--slo", "latency_p99=1"], "does not parse"),
    (["--find-max-rate"], "needs --slo"),
    (["--find-max-rate", "--find-max-concurrency", "--slo", "ttft_p99=1"], "one at a time"),
    (["--find-max-rate", "--slo", "ttft_p99=0.0001", "--search-start", "32", "--search-low", "32"],
     "not met even at 32"),
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
                       slo={"ttft_s_p99": _slo_from_one_in_flight(server, 64, 16)})
    rec = capacity_record(base, CapacitySearch(over="concurrency", search_start=2, warmup_requests=2))
    search = rec.metrics["capacity_search"]
    probes = {p["value"]: p for p in search["probes"]}
    assert search["converged"] and search["first_failing"] - search["capacity"] == 1
    assert probes[search["capacity"]]["passed"] and not probes[search["first_failing"]]["passed"]
    assert rec.metrics["capacity_concurrency"] == search["capacity"] == rec.config["max_concurrency"]
    assert rec.config["request_rate"] == "inf"
