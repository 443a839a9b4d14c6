"""`llmdissect bench infer` as a user runs it: children, records in SQLite, JSON, exit codes."""
import json
from pathlib import Path

import pytest

from conftest import assert_user_error, run_cli
from llmdissect.results import open_store

SMALL = ("--model", "debug-llama", "--input-len", "8", "--output-len", "3", "--warmup", "1", "--repeats", "1")


def _records(db: Path):
    with open_store(db) as store:
        return store.query(kind="infer")


@pytest.mark.slow
def test_grid_stores_one_record_per_point_and_prints_one_json_line_each(db_path: Path):
    proc = run_cli("bench", "infer", *SMALL, "--batch", "1,2", "--quant", "none,int4-weight", "--json",
                   "--db", str(db_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4
    printed = [json.loads(line) for line in lines]
    assert sorted((r["config"]["quant"], r["config"]["batch"], r["status"]) for r in printed) == [
        ("int4-weight", 1, "skipped"), ("int4-weight", 2, "skipped"), ("none", 1, "ok"), ("none", 2, "ok")]
    stored = {r.id: r for r in _records(db_path)}
    assert set(stored) == {r["id"] for r in printed}
    for r in printed:
        if r["status"] == "ok":
            m = r["metrics"]
            assert {"ttft_s", "tpot_s", "e2e_latency_s", "prefill_tokens_per_s", "decode_tokens_per_s",
                    "kv_cache_bytes", "peak_memory_bytes", "peak_rss_bytes", "first_call_s",
                    "hardware_allows"} <= set(m)
            assert m["kv_cache_bytes"] == 2 * 2 * r["config"]["batch"] * (8 + 3 - 1) * 2 * 16 * 4
            assert r["env"]["torch_threads"] >= 1 and r["kind"] == "infer" and r["source"] == "measured"
        else:
            assert "CUDA" in r["error"] and stored[r["id"]].status == "skipped"
    assert "skipped" in proc.stderr


@pytest.mark.slow
def test_single_point_human_output_and_single_json_record(db_path: Path):
    proc = run_cli("bench", "infer", *SMALL, "--cache", "static", "--quant", "int8-weight", "--db", str(db_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text in ("ttft_s", "tpot_s", "decode_tokens_per_s", "Decode bandwidth achieved", "Prefill FLOP/s achieved",
                 "not measured", "First call"):
        assert text in proc.stdout, text
    proc = run_cli("bench", "infer", *SMALL, "--json", "--db", str(db_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(proc.stdout)  # exactly one JSON document
    assert record["status"] == "ok" and record["config"]["output_len"] == 3
    assert len(_records(db_path)) == 2


def test_unsupported_point_alone_exits_2_with_one_line_and_is_stored(db_path: Path):
    assert_user_error(run_cli("bench", "infer", *SMALL, "--quant", "int4-weight", "--db", str(db_path)),
                      "int4-weight", "CUDA")
    proc = run_cli("bench", "infer", *SMALL, "--attn", "flash", "--json", "--db", str(db_path))
    assert_user_error(proc, "flash", "CUDA")
    assert json.loads(proc.stdout)["status"] == "skipped"
    records = _records(db_path)
    assert [r.status for r in records] == ["skipped", "skipped"]
    assert {r.config["quant"] for r in records} == {"int4-weight", "none"}


@pytest.mark.parametrize("args, fragment", [
    (("--batch", "0"), "positive"), (("--quant", "int3"), "unknown quantization"),
    (("--cache", "paged"), "unknown cache"), (("--input-len", "x"), "whole numbers"),
    (("--device", "cuda"), "no NVIDIA GPU"), (("--dtype", "fp64"), "dtype"), (("--threads", "0"), "--threads"),
])
def test_bad_input_exits_2_before_running(db_path: Path, args, fragment):
    assert_user_error(run_cli("bench", "infer", *SMALL, *args, "--db", str(db_path)), fragment)


def test_a_point_past_its_timeout_is_recorded_as_timeout(db_path: Path):
    proc = run_cli("bench", "infer", *SMALL, "--timeout-s", "0.5", "--db", str(db_path))
    assert proc.returncode == 1 and "timeout" in proc.stderr and "Traceback" not in proc.stderr
    [record] = _records(db_path)
    assert record.status == "timeout" and record.config["model"] == "debug-llama"
