"""`bench serve` against a real `transformers serve` process on 127.0.0.1 (debug-llama).

One server for the module; every check is on the metric definitions of docs/metrics.md."""
import asyncio
import http.server
import json
import statistics
import threading

import pytest
from serve_helpers import start_debug_server

from conftest import assert_user_error, run_cli
from llmdissect.results import open_store
from llmdissect.workloads.serve.loadgen import ServeConfig, run_async
from llmdissect.workloads.serve.local_server import free_port
from llmdissect.workloads.serve.metrics import request_itls
from llmdissect.workloads.serve.record import serve_record

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_debug_server(tmp_path_factory.mktemp("serve-log"))
    try:
        yield s
    finally:
        s.stop()


def _run(server, **kw):
    kw = {"num_prompts": 8, "input_len": 16, "output_len": 8, **kw}
    return asyncio.run(run_async(ServeConfig(base_url=server.base_url, **kw)))


def _check_definitions(out, n, stream=True):
    m = out.metrics
    assert m["completed"] + m["failed"] == n
    assert m["failed"] == 0, m["errors"]
    assert m["output_tokens_source"] == "usage"
    assert m["output_tokens"] == sum(r.output_tokens for r in out.results)
    assert out.config_extra["sent_fields"] == []  # transformers serve rejects ignore_eos: probed, not sent
    for r in out.results:
        assert r.ok and 1 <= r.output_tokens <= r.requested_output_len
        if stream:
            assert r.ttft_s <= r.e2e_s
            assert len(r.chunk_times_s) <= r.output_tokens
            if r.output_tokens > 1 and len(r.chunk_times_s) > 1:  # the mean ITL of a request is its TPOT
                assert statistics.fmean(request_itls(r)) == pytest.approx(r.tpot_s, rel=1e-9)
            elif r.output_tokens > 1:  # the server sent every token in one chunk: no gap to sample
                assert request_itls(r) == []
        else:
            assert r.ttft_s is None and r.e2e_s > 0
    assert m["request_throughput_per_s"] == pytest.approx(m["completed"] / m["duration_s"])
    assert (m["ttft_s"] is not None) == stream and (m["itl_s"] is not None) == stream


def test_streaming_completions_at_a_poisson_rate(server):
    out = _run(server, num_prompts=12, request_rate=20.0, slo={"ttft_s": 5.0, "tpot_s": 1.0})
    _check_definitions(out, 12)
    # synthetic prompts are exactly --input-len tokens by the server's own count
    assert [r.prompt_tokens for r in out.results] == [16] * 12
    m = out.metrics
    assert m["goodput_per_s"] == pytest.approx(m["request_throughput_per_s"])  # generous SLOs: all good
    # every gap is one sample: each token after the first of a request the server streamed in
    # more than one chunk (one sent whole has no gap to sample; _check_definitions allows it)
    assert m["itl_s"]["n"] == sum(r.output_tokens - 1 for r in out.results if len(r.chunk_times_s) > 1)
    assert len(m["send_offsets_s"]) == 12 and m["client_cpu_s"] > 0
    sched, sent = m["scheduled_offsets_s"], m["send_offsets_s"]
    assert max(abs(a - b) for a, b in zip(sched, sent)) < 0.05  # sent on schedule


def test_streaming_chat_with_a_concurrency_cap(server):
    out = _run(server, endpoint="chat", num_prompts=8, max_concurrency=2)
    _check_definitions(out, 8)
    spans = [(r.send_offset_s, r.send_offset_s + r.e2e_s) for r in out.results]
    in_flight = [sum(1 for a, b in spans if a <= t < b) for t, _ in spans]
    assert max(in_flight) == 2  # capped at 2, and the cap was reached (rate inf)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_non_streaming(server, endpoint):
    out = _run(server, endpoint=endpoint, stream=False, num_prompts=4, request_rate=50.0)
    _check_definitions(out, 4, stream=False)
    assert out.metrics["e2e_latency_s"]["n"] == 4


def test_replayed_arrival_file(server, tmp_path):
    first = _run(server, num_prompts=6, request_rate=10.0, seed=5)
    f = tmp_path / "arrivals.json"
    f.write_text(json.dumps({"send_offsets_s": first.metrics["send_offsets_s"]}))
    again = _run(server, num_prompts=6, arrivals=str(f), seed=99)  # another seed: arrivals come from the file
    _check_definitions(again, 6)
    base = first.metrics["send_offsets_s"][0]
    assert again.metrics["scheduled_offsets_s"] == pytest.approx([x - base for x in first.metrics["send_offsets_s"]])
    assert max(abs(a - b) for a, b in zip(again.metrics["scheduled_offsets_s"], again.metrics["send_offsets_s"])) < 0.05


def test_rate_sweep_cli_stores_one_record_per_rate(server, tmp_path):
    db = tmp_path / "r.db"
    proc = run_cli("bench", "serve", "--base-url", server.base_url, "--num-prompts", "6", "--input-len", "8",
                   "--output-len", "4", "--sweep-rates", "5,inf", "--slo", "ttft=2,tpot=0.5", "--json", "--db", str(db),
                   "--api-key", "sk-secret-test-key", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert [r["config"]["request_rate"] for r in records] == [5.0, "inf"]
    for r in records:
        assert r["kind"] == "serve" and r["status"] == "ok"
        assert r["metrics"]["completed"] == 6 and r["metrics"]["goodput_per_s"] is not None
    with open_store(db) as store:
        stored = store.query(kind="serve")
    assert sorted(s.id for s in stored) == sorted(r["id"] for r in records)
    assert "sk-secret-test-key" not in db.read_bytes().decode("latin-1")  # the key is never stored


def test_human_output_and_server_named_model(server, tmp_path):
    proc = run_cli("bench", "serve", "--base-url", server.base_url + "/v1", "--num-prompts", "3", "--input-len", "8",
                   "--output-len", "4", "--endpoint", "chat", "--db", str(tmp_path / "r.db"),
                   "--save-arrivals", str(tmp_path / "a.json"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ttft_s" in proc.stdout and "completed 3, failed 0" in proc.stdout
    assert len(json.loads((tmp_path / "a.json").read_text())["send_offsets_s"]) == 3


def test_sharegpt_dataset_output_lengths_follow_the_replies(server, tmp_path):
    from llmdissect.workloads.serve.prompts import Tok

    tok = Tok(server.folder)
    items = [{"conversations": [{"from": "human", "value": f"question number {i} about llamas"},
                                {"from": "gpt", "value": " ".join(["answer"] * (i + 2))}]} for i in range(4)]
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps(items))
    out = _run(server, dataset=str(f), num_prompts=4, output_len=None, request_rate=50.0)
    _check_definitions(out, 4)
    wanted = {tok.count(" ".join(["answer"] * (i + 2))) for i in range(4)}
    assert {r.requested_output_len for r in out.results} == wanted
    prompts = {tok.count(f"question number {i} about llamas") for i in range(4)}
    assert {r.prompt_tokens for r in out.results} <= prompts  # the server counts the prompt as we do
    assert out.config_extra["input_len_exact"] is False


def test_unreachable_url_is_exit_2_and_a_stored_record(tmp_path):
    db = tmp_path / "r.db"
    proc = run_cli("bench", "serve", "--base-url", f"http://127.0.0.1:{free_port()}", "--num-prompts", "2",
                   "--db", str(db), timeout=60)
    assert_user_error(proc, "cannot reach")
    with open_store(db) as store:
        (rec,) = store.query(kind="serve")
    assert rec.status == "failed" and "cannot reach" in rec.error


def test_non_openai_answer_is_exit_2(tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        proc = run_cli("bench", "serve", "--base-url", f"http://127.0.0.1:{httpd.server_address[1]}",
                       "--model", "m", "--num-prompts", "2", "--json", "--db", str(tmp_path / "r.db"), timeout=60)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert_user_error(proc, "does not answer like an openai-compatible server")
    assert proc.stdout.count("\n") == 1 and json.loads(proc.stdout)["status"] == "failed"


def test_a_failed_record_from_serve_record_itself(server):
    rec, bad = serve_record(ServeConfig(base_url=server.base_url, model="no-such-model", num_prompts=2))
    assert bad and rec.status == "failed" and "HTTP" in rec.error
