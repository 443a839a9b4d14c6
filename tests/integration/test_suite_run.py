"""`llmdissect run SUITE`: real child processes, real limits, a real SIGKILL, a real store."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import assert_user_error, run_cli

BASE = "    model: debug-llama\n    steps: 1\n    warmup: 0\n"
POINT = BASE + "    seq: 32\n"


def stored(db: Path, suite: str) -> list[dict]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT record_json FROM runs WHERE suite = ? ORDER BY rowid", (suite,)).fetchall()
    finally:
        con.close()
    return [json.loads(r[0]) for r in rows]


@pytest.mark.slow
def test_failed_oom_timeout_are_recorded_and_the_suite_goes_on(tmp_path, db_path):
    bad_data = tmp_path / "bad.jsonl"
    bad_data.write_text("this is not JSON\n")
    suite = tmp_path / "faults.yaml"
    suite.write_text(
        "suite: faults\nentries:\n"
        f"  - kind: pretrain\n    name: ok\n{POINT}"
        f"  - kind: pretrain\n    name: oom\n{BASE}    seq: 512\n    micro_batch: 128\n    max_memory: 2500M\n"
        # long enough to time out even in a child forked from a warm process (no imports to wait for)
        "  - kind: pretrain\n    name: timeout\n    model: debug-llama\n    steps: 100000\n    warmup: 0\n"
        "    seq: 40\n    timeout: 1\n"
        f"  - kind: pretrain\n    name: failed\n{BASE}    seq: 56\n    data: {bad_data}\n"
        "  - kind: estimate\n    name: estimate\n    workload: pretrain\n    model: llama2-7b\n    hardware: 8xa800\n"
        "    zero: 3\n"
        "  - kind: pretrain\n    name: too-big\n    model: llama2-70b\n    seq: 32\n")
    proc = run_cli("run", str(suite), "--db", str(db_path), "--json", timeout=400)
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # exactly one JSON document
    assert doc["kind"] == "plan" and doc["metrics"]["total"] == 6
    by_name = {p["name"]: p for p in doc["metrics"]["points"]}
    assert {n: p["status"] for n, p in by_name.items()} == {
        "ok": "ok", "oom": "oom", "timeout": "timeout", "failed": "failed", "estimate": "ok", "too-big": "skipped"}
    assert "not JSON" in by_name["failed"]["error"]
    assert "needs at least" in by_name["too-big"]["error"]
    records = stored(db_path, "faults")
    assert len(records) == 6
    assert {r["config"]["suite_entry"]: r["status"] for r in records} == \
        {n: p["status"] for n, p in by_name.items()}
    assert {r["config"]["suite_point"] for r in records} == {p["key"] for p in by_name.values()}
    ok = next(r for r in records if r["config"]["suite_entry"] == "ok")
    assert ok["source"] == "measured" and ok["metrics"]["step_time_s"]["median"] > 0
    # the suite's children were forked from one warm process, and every record says so
    assert {r["env"].get("launch") for r in records if r["source"] == "measured" and r["status"] != "skipped"} \
        == {"forked from a warm process"}
    assert next(r for r in records if r["kind"] == "estimate")["source"] == "estimated"
    assert "points, 1 failed" in proc.stderr or "failed" in proc.stderr  # the progress bar's counts

    # validate pairs the ok measurement with an estimate of the same configuration
    val = run_cli("validate", "--suite", "faults", "--db", str(db_path), "--json", check=True)
    v = json.loads(val.stdout)
    pair = next(p for p in v["pairs"] if p["metric"] == "peak_memory_bytes")
    assert pair["record_id"] == ok["id"] and pair["measured"] == ok["metrics"]["peak_memory_bytes"]
    assert pair["estimate"] == "computed" and pair["predicted"] > 0
    assert v["summary"][0]["mape"] == pytest.approx(abs(pair["error"]))

    # resuming runs nothing; with --retry-failed the three failed points are run again
    for extra, to_run in (([], set()), (["--retry-failed"], {"oom", "timeout", "failed"})):
        plan = json.loads(run_cli("run", str(suite), "--db", str(db_path), "--plan", "--resume", *extra, "--json",
                                  check=True).stdout)
        assert {p["name"] for p in plan["metrics"]["points"] if p["action"] == "run"} == to_run


@pytest.mark.slow
def test_sigkill_mid_suite_then_resume_runs_each_point_exactly_once(tmp_path, db_path):
    import psutil

    suite = tmp_path / "resume.yaml"
    # the second point runs for seconds: a forked point of one step ends in well under the 0.2 s
    # between polls, and on a fast machine the whole suite could end before the kill
    suite.write_text("suite: resume\nentries:\n"
                     "  - kind: pretrain\n    model: debug-llama\n    warmup: 0\n    seq: 32\n"
                     "    grid:\n      steps: [1, 4000]\n"
                     "  - kind: estimate\n    workload: infer\n    model: llama2-7b\n    grid:\n"
                     "      hardware: [a800, rtx3090]\n")
    proc = subprocess.Popen([sys.executable, "-m", "llmdissect", "run", str(suite), "--db", str(db_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if db_path.exists() and len(stored(db_path, "resume")) >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the suite ended before it could be killed"
    orphans = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)  # the suite process only, as a crash would
    proc.wait()
    for p in orphans:  # its point's child lives on without a parent to record it; free the cores
        try:
            p.kill()
        except psutil.Error:
            pass
    before = stored(db_path, "resume")
    assert 1 <= len(before) < 4
    plan = json.loads(run_cli("run", str(suite), "--db", str(db_path), "--plan", "--resume", "--json",
                              check=True).stdout)
    actions = [p["action"] for p in plan["metrics"]["points"]]
    assert sum(a.startswith("done") for a in actions) == len(before) and actions.count("run") == 4 - len(before)
    done = run_cli("run", str(suite), "--db", str(db_path), "--resume", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    after = stored(db_path, "resume")
    keys = [r["config"]["suite_point"] for r in after]
    assert len(after) == 4 and len(set(keys)) == 4  # every point exactly once
    assert {r["id"] for r in before} <= {r["id"] for r in after}  # nothing lost
    again = run_cli("run", str(suite), "--db", str(db_path), "--resume", "--json", check=True)
    assert len(stored(db_path, "resume")) == 4  # nothing left to run
    assert all(p["action"].startswith("done") for p in json.loads(again.stdout)["metrics"]["points"])


def test_unwritable_store_fails_before_anything_runs(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(f"entries:\n  - kind: pretrain\n{POINT}")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for db in (a_file / "results.db", Path("/proc/llmdissect/results.db")):
        proc = run_cli("run", str(suite), "--db", str(db))
        assert_user_error(proc, "results database")
        assert proc.stdout == ""  # no plan shown, no point started


def test_malformed_suite_file_exits_2_naming_line_and_field(tmp_path, db_path):
    suite = tmp_path / "bad.yaml"
    suite.write_text("entries:\n  - kind: pretrain\n    model: debug-llama\n    grid:\n      zero: [0, nine]\n")
    proc = run_cli("run", str(suite), "--db", str(db_path))
    assert_user_error(proc, "bad.yaml: line 5", "entries[0].grid.zero")
    assert not db_path.exists()


def test_plan_json_is_one_plan_record(tmp_path, db_path):
    suite = tmp_path / "p.yaml"
    suite.write_text("suite: p\nentries:\n  - kind: infer\n    model: debug-llama\n    grid:\n      batch: [1, 2]\n"
                     "  - kind: infer\n    model: debug-llama\n    attn: flash\n"
                     "  - kind: ops\n    model: debug-llama\n    tokens: 64\n")
    doc = json.loads(run_cli("run", str(suite), "--plan", "--json", "--db", str(db_path), check=True).stdout)
    assert doc["kind"] == "plan" and doc["source"] == "estimated" and doc["config"]["suite"] == "p"
    points = doc["metrics"]["points"]
    assert [p["action"] for p in points] == ["run", "run", "skip", "run"]
    assert "flash" in points[2]["skip_reason"]
    assert points[0]["prediction"]["fits"] is True and points[0]["prediction"]["memory_bytes"] > 0
    assert points[1]["prediction"]["memory_bytes"] > points[0]["prediction"]["memory_bytes"]  # batch 2 > 1
    assert not db_path.exists()  # a plan runs and stores nothing


@pytest.mark.slow
def test_sigterm_stops_the_running_point_and_leaves_no_orphan(tmp_path, db_path):
    import psutil

    suite = tmp_path / "term.yaml"
    suite.write_text("suite: term\nentries:\n  - kind: pretrain\n    model: debug-llama\n    seq: 32\n    steps: 50\n")
    proc = subprocess.Popen([sys.executable, "-m", "llmdissect", "run", str(suite), "--db", str(db_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline, children = time.monotonic() + 120, []
    while time.monotonic() < deadline and not children and proc.poll() is None:
        try:  # the point's worker (not e.g. the nvidia-smi probe of the planning)
            children = [p for p in psutil.Process(proc.pid).children(recursive=True)
                        if "llmdissect.launch.worker" in " ".join(p.cmdline())]
        except psutil.Error:
            children = []
        time.sleep(0.2)
    assert children, "the point's child never started"
    proc.send_signal(signal.SIGTERM)  # what scancel or a batch system's time limit sends
    assert proc.wait(timeout=60) == 143
    assert "--resume" in proc.stderr.read()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.pid for p in alive]
    assert stored(db_path, "term") == []  # the stopped point is not recorded: --resume runs it


def test_quick_keeps_its_steps_and_validate_is_last():
    doc = json.loads(run_cli("run", "quick", "--plan", "--json", check=True).stdout)
    names = [s["name"] for s in doc["metrics"]["steps"]]
    assert doc["kind"] == "plan" and names[-1] == "validate" and "pretrain-single" in names and "moe" in names
    assert_user_error(run_cli("run", "quick", "--resume"), "suite files")


@pytest.mark.slow
def test_quick_moe_step_measures_a_mixture_of_experts(db_path):
    run_cli("run", "quick", "--only", "moe", "--db", str(db_path), check=True, timeout=600)
    records = stored(db_path, "quick")
    # the experts' grouped GEMMs (bench ops), a pre-training point and a decode point
    assert sorted(r["kind"] for r in records) == ["infer", "ops", "pretrain"]
    assert all(r["status"] == "ok" and r["config"]["model"] == "tiny-moe" for r in records)
    ops = next(r for r in records if r["kind"] == "ops")
    assert [rows for rows, _ in ops["metrics"]["efficiency"]["experts_by_rows"]] == [8, 64]  # tokens per expert
    # validate pairs both points with the estimate of the same configuration (memory needs no calibration)
    doc = json.loads(run_cli("validate", "--db", str(db_path), "--json", check=True).stdout)
    assert {p["record_id"] for p in doc["pairs"]} == {r["id"] for r in records if r["kind"] != "ops"}
