"""The fault campaign of the results store: a writer killed inside a transaction, a full disk,
the store made read-only or deleted under a running suite (many writers at once:
test_store_backends.py). Real processes, real SQLite files, real limits; nothing recorded is
lost."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import run_cli

from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store

ESTIMATES = """\
suite: many
entries:
  - kind: estimate
    workload: pretrain
    model: llama2-7b
    hardware: 8xa800
    grid:
      seq: [256, 512, 1024, 2048, 4096]
      zero: [0, 1, 2, 3]
      micro_batch: [1, 2]
"""

# a point that runs for a few seconds whatever the machine (its child is stopped at 3 s and
# recorded as `timeout`), between two instant ones
SLOW_MIDDLE = """\
suite: slow
entries:
  - kind: estimate
    name: before
    workload: pretrain
    model: llama2-7b
    hardware: 8xa800
  - kind: pretrain
    name: running
    model: debug-llama
    seq: 32
    steps: 1000000  # far past the timeout on any machine (1000 steps of seq 32 can end inside 3 s)
    timeout: 3
  - kind: estimate
    name: after
    workload: pretrain
    model: llama2-13b
    hardware: 8xa800
"""


def rows(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    try:
        return [json.loads(r[0]) for r in con.execute("SELECT record_json FROM runs ORDER BY rowid")]
    finally:
        con.close()


def _recorded(db: Path) -> list[dict]:
    """The store's records, or none while the file or its tables are still being made (a
    loaded machine widens the moment between the file's creation and its schema's)."""
    try:
        return rows(db) if db.exists() else []
    except sqlite3.OperationalError:
        return []


def last_line(text: str) -> str:
    return [line for line in text.strip().splitlines() if line.strip()][-1]


INSIDE_A_TRANSACTION = """
import sys, time
from llmdissect.results.schema import RunRecord
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store
store = open_store(sys.argv[1])
for i in range(50):
    store.add(RunRecord(kind="estimate", source="estimated", config={"i": i}))
conn = store._conn
conn.execute("BEGIN IMMEDIATE")  # holds the write lock from here
rec = RunRecord(kind="estimate", source="estimated", config={"i": "uncommitted"})
conn.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)", (rec.id, rec.kind, rec.source, rec.status, rec.suite,
             rec.started_at, rec.finished_at, rec.version, rec.to_json()))
print("inside", flush=True)
time.sleep(60)
"""


def test_a_writer_killed_inside_a_transaction_leaves_the_committed_records_and_no_lock(db_path):
    proc = subprocess.Popen([sys.executable, "-c", INSIDE_A_TRANSACTION, str(db_path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "inside"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    with open_store(db_path) as store:  # opens cleanly, the hot journal rolled back
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert sorted(r.config["i"] for r in store.query()) == list(range(50))
        store.add(RunRecord(kind="estimate", source="estimated"))  # the lock is free
        assert store.count() == 51


def _file_size_limit(limit_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


def test_a_full_disk_ends_the_suite_with_one_line_and_keeps_every_record(tmp_path, db_path):
    suite = tmp_path / "many.yaml"
    suite.write_text(ESTIMATES)
    # no file of this run may pass 100 kB: the store's write-ahead log reaches it after a few
    # records, as it would reach the end of a full disk (Python ignores SIGXFSZ: writes fail)
    proc = subprocess.run([sys.executable, "-m", "llmdissect", "run", str(suite), "--db", str(db_path)],
                          capture_output=True, text=True, timeout=120, preexec_fn=_file_size_limit(100_000))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = last_line(proc.stderr)
    assert line.startswith(f"error: cannot write to results database {db_path}") and "was kept in" in line, line
    kept_dir = db_path.parent / "records"
    earlier = rows(db_path)
    assert 1 <= len(earlier) < 40 and all(r["status"] == "ok" for r in earlier)
    # nothing lost: the refused record is in its file; import it, resume, every point exactly once
    assert "1 added" in run_cli("results", "import", str(kept_dir), "--db", str(db_path), check=True).stdout
    run_cli("run", str(suite), "--db", str(db_path), "--resume", check=True, timeout=120)
    points = [r["config"]["suite_point"] for r in rows(db_path)]
    assert len(points) == 40 and len(set(points)) == 40


SAVE_ONE = """
import sys
from llmdissect.errors import UserError
from llmdissect.results.recording import save
from llmdissect.results.schema import RunRecord
try:
    record = RunRecord(kind="pretrain", config={"model": "debug-llama"}, metrics={"tokens_per_s": 1.0})
    save(record.finish(), sys.argv[1])
except UserError as e:
    print(e, file=sys.stderr)
    sys.exit(2)
"""


def test_a_measured_record_the_store_refuses_is_kept_in_a_file(db_path):
    with open_store(db_path) as store:  # a store already past the limit the writer gets below
        for i in range(20):
            store.add(RunRecord(kind="estimate", source="estimated", config={"i": i}))
    proc = subprocess.run([sys.executable, "-c", SAVE_ONE, str(db_path)], capture_output=True, text=True,
                          timeout=60, preexec_fn=_file_size_limit(8_000))
    assert proc.returncode == 2, proc.stderr
    assert f"results database {db_path}: disk I/O error" in proc.stderr and "was kept in" in proc.stderr
    kept = list((db_path.parent / "records").glob("pretrain-*.records.jsonl"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["metrics"] == {"tokens_per_s": 1.0}
    with open_store(db_path) as store:
        assert store.count() == 20  # the earlier records intact


def _without_root_override() -> list[str]:
    """Root writes read-only files anyway: as root the suite runs without the capabilities
    that override file permissions (setpriv drops them from its bounding set)."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    works = shutil.which("setpriv") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0
    if not works:
        why = "running as root and setpriv cannot drop the permission-override capabilities"
        if os.environ.get("CI"):
            pytest.fail(f"{why} in CI: run the tests as a user, or where setpriv (util-linux) works")
        pytest.skip(why)
    return prefix


WHAT_HAPPENED = {"deleted": "was deleted or replaced while in use", "read-only": "was made read-only while in use"}


@pytest.mark.parametrize("fault", list(WHAT_HAPPENED))
def test_store_lost_under_a_running_suite_keeps_the_running_points_record(tmp_path, fault):
    prefix = _without_root_override() if fault == "read-only" else []
    suite, db = tmp_path / "slow.yaml", tmp_path / "results.db"
    suite.write_text(SLOW_MIDDLE)
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "llmdissect", "run", str(suite), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _recorded(db):  # the first point recorded: the slow one is running
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    if fault == "deleted":
        for f in tmp_path.glob("results.db*"):
            f.unlink()
    else:
        db.chmod(0o444)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-2000:]
    assert "Traceback" not in err
    line = last_line(err)
    assert f"results database {db} {WHAT_HAPPENED[fault]}" in line and "was kept in" in line, line
    kept = list((tmp_path / "records").glob("point-*.records.jsonl"))
    assert len(kept) == 1
    record = json.loads(kept[0].read_text())
    assert record["config"]["suite_entry"] == "running" and record["status"] == "timeout"
    if fault == "read-only":  # the store itself: the first record intact, nothing after it
        assert [r["config"]["suite_entry"] for r in rows(db)] == ["before"]
