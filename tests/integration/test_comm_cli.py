"""`llmdissect bench comm` as a user runs it: real torchrun, real gloo ranks, real SQLite."""
import json
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import assert_user_error, run_cli
from llmdissect.calibration_profile import load_profile
from llmdissect.results import open_store

ALL_OPS = "all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all,send_recv"
SMALL = ("--min-bytes", "1K", "--max-bytes", "64K", "--factor", "8", "--iters", "3", "--warmup", "1")


def _rows(record: dict, op: str, placement: str | None = None) -> list[dict]:
    return [r for r in record["metrics"]["rows"] if r["op"] == op and placement in (None, r["placement"])]


@pytest.mark.slow
def test_bad_input_exits_2_with_one_line(db_path: Path):
    assert_user_error(run_cli("bench", "comm", "--min-bytes", "1M", "--max-bytes", "1K", "--db", str(db_path)),
                      "above --max-bytes")
    assert_user_error(run_cli("bench", "comm", "--ops", "all_reduce,allreduce", "--db", str(db_path)),
                      "unknown operator 'allreduce'")
    assert_user_error(run_cli("bench", "comm", "--max-bytes", "12parsecs", "--db", str(db_path)), "bad size")
    assert_user_error(run_cli("bench", "comm", "--nproc", "1", "--db", str(db_path)), "at least 2 processes")
    assert_user_error(run_cli("bench", "comm", "--backend", "nccl", "--db", str(db_path)), "nccl needs CUDA")
    assert not db_path.exists()  # nothing was launched, nothing stored


@pytest.mark.slow
def test_two_ranks_every_operator_one_json_record(db_path: Path):
    proc = run_cli("bench", "comm", "--nproc", "2", "--ops", ALL_OPS, *SMALL, "--db", str(db_path), "--json",
                   check=True)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["kind"], record["status"], record["source"]) == ("comm", "ok", "measured")
    assert record["config"]["world_size"] == 2 and record["config"]["backend"] == "gloo"
    # both placements where torch offers both; sizes 1K, 8K, 64K for each
    for op, placements in [("all_reduce", ["in-place"]), ("all_gather", ["out-of-place", "in-place"]),
                           ("reduce_scatter", ["out-of-place", "in-place"]), ("broadcast", ["in-place"]),
                           ("reduce", ["in-place"]), ("all_to_all", ["out-of-place"]),
                           ("send_recv", ["out-of-place"])]:
        for p in placements:
            assert [r["size_bytes"] for r in _rows(record, op, p)] == [1024, 8192, 65536], (op, p)
    for r in record["metrics"]["rows"]:
        assert r["wrong"] == 0 and r["time_s"]["n"] == 3
        assert r["algbw_bytes_per_s"] == pytest.approx(r["size_bytes"] / r["time_s"]["median"])
        assert r["busbw_bytes_per_s"] == pytest.approx(r["algbw_bytes_per_s"] * r["busbw_factor"])
        # per iteration the slowest rank: its median is at least every rank's own median
        assert r["time_s"]["median"] >= max(r["rank_median_time_s"]) * (1 - 1e-9)
    assert {r["op"]: r["busbw_factor"] for r in record["metrics"]["rows"]} == {
        "all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0, "reduce": 1.0,
        "all_to_all": 0.5, "send_recv": 1.0}
    rows = record["metrics"]["rows"]
    assert record["metrics"]["avg_busbw_bytes_per_s"] == pytest.approx(
        sum(r["busbw_bytes_per_s"] for r in rows) / len(rows))
    with open_store(db_path) as store:
        assert store.get(record["id"]).status == "ok"
    fits = load_profile()["collectives"]["gloo"]
    assert set(fits) == set(ALL_OPS.split(","))
    assert fits["all_reduce"]["nproc"] == 2 and fits["all_reduce"]["record_id"] == record["id"]
    assert fits["all_reduce"]["alpha_s"] >= 0 and fits["all_reduce"]["beta_s_per_byte"] >= 0
    assert fits["all_reduce"]["fit_error"] == record["metrics"]["fits"]["all_reduce"]["fit_error"]


def test_min_time_times_short_sizes_longer_up_to_max_iters(db_path: Path):
    # a 1K-64K gloo call takes 0.1-3 ms here, so 1 s asks for more than 40 calls: capped at 40
    proc = run_cli("bench", "comm", "--nproc", "2", "--ops", "all_reduce", *SMALL, "--min-time-s", "1",
                   "--max-iters", "40", "--db", str(db_path), check=True)
    assert "3-40 iterations (until 1 s per size)" in proc.stdout
    with open_store(db_path) as store:
        (record,) = store.query(kind="comm")
    assert [r["time_s"]["n"] for r in record.metrics["rows"]] == [40, 40, 40]
    assert all(len(r["rank_median_time_s"]) == 2 for r in record.metrics["rows"])


@pytest.mark.slow
def test_passes_keep_one_row_per_size(db_path: Path):
    # 3 iterations over 2 passes: 2 timed calls in each pass, the quietest pass's in the row; the fit still stored
    proc = run_cli("bench", "comm", "--nproc", "2", "--ops", "all_reduce,all_gather", *SMALL, "--passes", "2",
                   "--no-profile", "--db", str(db_path), check=True)
    assert "3 iterations over 2 passes" in proc.stdout
    with open_store(db_path) as store:
        (record,) = store.query(kind="comm")
    rows = record.metrics["rows"]
    assert len(rows) == 3 + 3 * 2  # one row per size and placement, not one per pass
    assert {r["passes"] for r in rows} == {2} and {r["time_s"]["n"] for r in rows} == {2}
    assert all("_samples" not in r and r["busbw_bytes_per_s"] > 0 for r in rows)
    assert record.config["passes"] == 2
    assert_user_error(run_cli("bench", "comm", "--passes", "0", "--db", str(db_path)), "bad --passes 0")


@pytest.mark.slow
def test_three_ranks_apply_the_n3_factors_human_table(db_path: Path):
    proc = run_cli("bench", "comm", "--nproc", "3", "--ops", "all_reduce,all_gather", "--dtype", "bf16", *SMALL,
                   "--db", str(db_path), check=True)
    out = proc.stdout
    assert "all_reduce (busbw factor 1.333)" in out and "all_gather (busbw factor 0.6667)" in out
    assert "Avg bus bandwidth" in out and "Alpha-beta fit" in out and "bf16" in out
    assert "1020" in out  # all_gather's 1K rounds down to 3 chunks of 170 bf16 elements
    with open_store(db_path) as store:
        (record,) = store.query(kind="comm")
    assert record.config["world_size"] == 3 and record.config["dtype"] == "bf16"
    for r in record.metrics["rows"]:
        factor = 4 / 3 if r["op"] == "all_reduce" else 2 / 3
        assert r["busbw_factor"] == pytest.approx(factor) and len(r["rank_median_time_s"]) == 3
        assert r["busbw_bytes_per_s"] == pytest.approx(r["size_bytes"] / r["time_s"]["median"] * factor)


@pytest.mark.slow
def test_a_wrong_expected_value_fails_the_run(db_path: Path):
    # The documented test hook shifts the expected values by 0.5: correct results must be caught.
    proc = run_cli("bench", "comm", "--nproc", "2", "--ops", "all_gather", *SMALL, "--check-offset", "0.5",
                   "--db", str(db_path), "--json")
    assert proc.returncode == 1
    record = json.loads(proc.stdout)
    assert record["status"] == "failed" and "wrong result: all_gather" in record["error"]
    assert "wrong result" in proc.stderr and "Traceback" not in proc.stderr
    with open_store(db_path) as store:
        assert store.get(record["id"]).status == "failed"
    assert "collectives" not in load_profile()  # a failed run calibrates nothing


@pytest.mark.slow
def test_a_rank_that_dies_fails_the_whole_run_fast(db_path: Path):
    t0 = time.monotonic()
    proc = run_cli("bench", "comm", "--nproc", "3", "--ops", "all_reduce", *SMALL, "--die-rank", "2",
                   "--timeout-s", "120", "--db", str(db_path))
    assert proc.returncode == 1
    assert time.monotonic() - t0 < 60  # torchrun stops the others; nobody waits for the timeout
    line = [err for err in proc.stderr.splitlines() if err.startswith("error:")][0]
    assert "rank 2" in line and "exit code 17" in line, line
    with open_store(db_path) as store:
        (record,) = store.query(kind="comm")
    assert record.status == "failed" and "rank 2" in record.error


def _tagged_processes(tag: str) -> list[int]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("LLMDISSECT_TEST_TAG") == tag:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_a_rank_that_hangs_ends_at_the_timeout_and_leaves_no_process(db_path: Path):
    tag = uuid.uuid4().hex
    t0 = time.monotonic()
    proc = run_cli("bench", "comm", "--nproc", "2", *SMALL, "--hang-rank", "1", "--timeout-s", "12",
                   "--db", str(db_path), "--json", env={"LLMDISSECT_TEST_TAG": tag})
    assert proc.returncode == 1 and time.monotonic() - t0 < 40
    record = json.loads(proc.stdout)
    assert record["status"] == "timeout" and "timed out after 12 s" in record["error"]
    with open_store(db_path) as store:
        assert store.get(record["id"]).status == "timeout"
    # torchrun puts each rank in a session of its own: the launcher must kill them too
    time.sleep(0.5)
    assert _tagged_processes(tag) == []
