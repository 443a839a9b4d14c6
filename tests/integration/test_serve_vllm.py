"""vLLM as a real engine: one server (the CPU build, from `.venv-vllm`) on 127.0.0.1 for the
module, `bench serve` against it naming vLLM's version and settings and scraping its
Prometheus /metrics, a shared-prefix load that its prefix cache hits; and a missing vLLM
environment as one line, exit 2. Where the environment is not installed the tests skip with
the reason; in CI, which installs it (`make test` makes it), they fail instead."""
from __future__ import annotations

import json
import os

import pytest
from serve_helpers import MODEL_CACHE

from conftest import assert_user_error, run_cli
from llmdissect.workloads.serve.vllm_engine import PYTHON_ENV, vllm_python

pytestmark = pytest.mark.slow  # vLLM takes about 95 s to start on 2 cores


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    if vllm_python() is None:
        why = "the vLLM environment is not installed (make vllm)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI's make test installs it")
        pytest.skip(why)
    from llmdissect.workloads.serve.local_server import start_server

    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = start_server("tiny-llama", engine="vllm", threads=1, folder=MODEL_CACHE / "tiny-llama-seed0",
                          log_path=log)
    yield server
    server.stop()


def bench(server, db, *args: str, input_len: int = 64) -> dict:
    proc = run_cli("bench", "serve", "--base-url", server.base_url, "--input-len", str(input_len), "--output-len",
                   "16", "--db", str(db), "--json", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_bench_serve_against_vllm_names_it_and_scrapes_its_metrics(vllm_server, db_path):
    record = bench(vllm_server, db_path, "--request-rate", "4", "--num-prompts", "16")
    assert record["status"] == "ok" and record["metrics"]["completed"] == 16
    server = record["env"]["server"]
    assert server["engine"] == "vllm" and server["version"] == vllm_server.settings["version"]
    assert int(server["cache_config"]["block_size"]) > 0  # its KV cache's settings, from /metrics
    sm = record["metrics"]["server_metrics"]
    assert len(sm["t_s"]) >= 2 and sm["failed_scrapes"] == 0
    assert max(sm["series"]["running"]) >= 1  # the server saw our requests in flight
    assert sm["generation_tokens_during_run"] >= 16 * 16  # and generated what we asked for
    assert 0 <= sm["kv_cache_use_max"] <= 1
    # the report draws what the server reported beside the client's latencies
    out = db_path.parent / "report"
    run_cli("report", "--db", str(db_path), "--out", str(out), check=True, timeout=240)
    html = (out / "report.html").read_text()
    assert 'data-plot="serve-server-0"' in html and "(vllm)" in html


def test_a_shared_prefix_load_hits_vllms_prefix_cache(vllm_server, db_path):
    # vLLM caches whole KV blocks (128 tokens on a CPU): a 256-token prefix is two of them
    record = bench(vllm_server, db_path, "--request-rate", "4", "--num-prompts", "12", "--shared-prefixes", "1",
                   "--prefix-len", "256", "--prefix-fraction", "1", input_len=320)
    sm = record["metrics"]["server_metrics"]
    # at most 256 of 320 prompt tokens after the first request (0.41 measured: requests that
    # arrive before the first has filled its blocks miss them); the run's own hits, not zero
    assert sm["prefix_cache_hit_rate"] > 0.2, sm
    # and the server's usage says so too (--enable-prompt-tokens-details)
    assert record["metrics"]["prefix_cache_hit_rate"] > 0.2


def test_transformers_serve_says_it_has_no_metrics(db_path, tmp_path):
    from serve_helpers import start_debug_server

    with start_debug_server(tmp_path) as server:
        proc = run_cli("bench", "serve", "--base-url", server.base_url, "--input-len", "16", "--output-len", "4",
                       "--request-rate", "4", "--num-prompts", "4", "--db", str(db_path), "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout)["metrics"]
    assert "server_metrics" not in m and "no Prometheus /metrics" in m["server_metrics_not_available"]


def test_a_missing_vllm_environment_is_one_line(tmp_path):
    proc = run_cli("serve-local", "--engine", "vllm", "--model", "debug-llama",
                   env={PYTHON_ENV: str(tmp_path / "no-such-python")}, timeout=60)
    assert_user_error(proc, "vLLM is not installed")


def test_a_model_vllm_cannot_load_is_one_line():
    if vllm_python() is None:
        if os.environ.get("CI"):
            pytest.fail("the vLLM environment is not installed; CI's make test installs it")
        pytest.skip("the vLLM environment is not installed (make vllm)")
    # debug-llama holds 512 positions: vLLM refuses a longer --max-model-len and exits
    proc = run_cli("serve-local", "--engine", "vllm", "--model", "debug-llama", "--max-model-len", "999999",
                   timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1]
    assert last.startswith("error: vLLM exited with code") and "max_model_len" in last, last
