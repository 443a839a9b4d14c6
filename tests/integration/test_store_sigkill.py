"""The store survives a writer killed mid-write: earlier records intact and readable."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from llmdissect.results import open_store

WRITER = """
import sys, itertools
from llmdissect.results import RunRecord, open_store
store = open_store(sys.argv[1])
big = "x" * 200_000  # large rows make a kill inside a write likely
for i in itertools.count():
    store.add(RunRecord(kind="ops", config={"i": i}, metrics={"pad": big}).finish())
    if i == 20:
        print("ready", flush=True)
"""


def test_sigkill_mid_write_keeps_earlier_records(tmp_path: Path):
    db = tmp_path / "results.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with open_store(db) as store:
        records = store.query()
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    indices = [r.config["i"] for r in records]
    assert len(indices) > 20
    assert indices == list(range(len(indices)))  # nothing lost before the last committed one
    assert all(r.metrics["pad"] == "x" * 200_000 for r in records)
