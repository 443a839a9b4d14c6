"""The same store tests against the SQLite file and a real PostgreSQL server (started by the
test on 127.0.0.1): same schema, same queries, same answers, concurrent writers, a writer
killed inside a transaction, the commands with `--db postgresql://...`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from tests.conftest import assert_user_error, run_cli

from llmdissect.errors import UserError
from llmdissect.results.jobfiles import import_folder, write_records_file
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import check_writable, open_existing, open_store


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request, tmp_path) -> str:
    """Where a fresh store lives: a file path, or a new database on the test's server."""
    if request.param == "sqlite":
        return str(tmp_path / "results.db")
    return request.getfixturevalue("postgres_url")


def record(i: int, **kw) -> RunRecord:
    kw.setdefault("started_at", f"2026-01-01T00:00:{i:02d}.000+00:00")
    return RunRecord(kind="estimate", source="estimated", config={"i": i}, **kw).finish("ok")


def test_add_get_query_and_filters(store_at):
    with open_store(store_at) as store:
        ids = [store.add(record(i, suite="a" if i % 2 else "b")) for i in range(6)]
        store.add(RunRecord(kind="pretrain", status="failed", started_at="2026-01-01T00:01:00.000+00:00"))
        assert store.count() == 7
        assert store.get(ids[3]).config == {"i": 3} and store.get(ids[3][:10]).id == ids[3]
        with pytest.raises(UserError, match="no run"):
            store.get("zzzz")
        assert [r.config["i"] for r in store.query(kind="estimate")] == [0, 1, 2, 3, 4, 5]
        assert [r.config["i"] for r in store.query(suite="a")] == [1, 3, 5]
        assert [r.kind for r in store.query(status="failed")] == ["pretrain"]
        assert [r.config["i"] for r in store.query(kind="estimate", since="2026-01-01T00:00:04")] == [4, 5]
        assert [r.config.get("i") for r in store.query(limit=2)] == [5, None]  # the newest two, oldest first
        assert {r.id for r in store.query(ids=ids[:2])} == set(ids[:2]) and store.query(ids=[]) == []
        again = store.get(ids[0])
        again.status = "failed"
        store.add(again)  # the same id again replaces the record
        assert store.count() == 7 and store.get(ids[0]).status == "failed"


def test_streaming_light_reads_and_pages(store_at):
    """iter_query streams in order with the same filters; light cuts the per-row tables in the
    database; a page is the newest LIMIT after OFFSET."""
    with open_store(store_at) as store:
        rows = [{"op": "x", "time_s": 1.0}] * 3
        for i in range(5):
            store.add(record(i, metrics={"tokens_per_s": float(i), "rows": rows}))
        store.add(RunRecord(kind="pretrain", status="failed", started_at="2026-01-01T00:01:00.000+00:00"))
        light = list(store.iter_query(status="ok", source="estimated", light=True))
        assert [r.config["i"] for r in light] == [0, 1, 2, 3, 4]
        assert all("rows" not in r.metrics and r.metrics["tokens_per_s"] == r.config["i"] for r in light)
        assert [r.metrics["rows"] for r in store.iter_query(kind="estimate")] == [rows] * 5
        assert [r.config.get("i") for r in store.query(limit=2, offset=2)] == [2, 3]


def test_import_is_idempotent(store_at, tmp_path):
    write_records_file(tmp_path / "jobs", "a.records.jsonl", [record(i) for i in range(4)])
    with open_store(store_at) as store:
        outcomes = [import_folder(store, tmp_path / "jobs") for _ in range(3)]
        assert [o.added for o in outcomes] == [4, 0, 0] and store.count() == 4


WRITER = """
import sys
import time
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store
with open_store(sys.argv[1]) as store:
    for i in range(int(sys.argv[3])):
        store.add(RunRecord(kind="estimate", source="estimated", config={"writer": sys.argv[2], "i": i}))
"""


def test_eight_writers_at_once_lose_nothing(store_at):
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, store_at, str(w), "500"]) for w in range(8)]
    assert [w.wait(timeout=300) for w in writers] == [0] * 8
    with open_store(store_at) as store:
        got = store.query()
    assert len(got) == 4000 and len({r.id for r in got}) == 4000
    assert sorted((r.config["writer"], r.config["i"]) for r in got) == \
        sorted((str(w), i) for w in range(8) for i in range(500))


KILLED_INSIDE = """
import sys, time
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store
store = open_store(sys.argv[1])
for i in range(20):
    store.add(RunRecord(kind="estimate", source="estimated", config={"i": i}))
def stuck(cur):
    cur.execute("INSERT INTO runs (id, kind, source, status, started_at, version, record_json) "
                "VALUES ('uncommitted', 'estimate', 'estimated', 'ok', 'now', '0', '{}')")
    print("inside", flush=True)
    time.sleep(60)
store._write(stuck)
"""


def test_a_writer_killed_inside_a_transaction_on_the_server(postgres_url):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_INSIDE, postgres_url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "inside"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    with open_store(postgres_url) as store:  # the server rolled the open transaction back
        assert sorted(r.config["i"] for r in store.query()) == list(range(20))
        store.add(record(99))
        assert store.count() == 21


def test_commands_with_a_server_store(postgres_url, tmp_path):
    assert check_writable(postgres_url) == postgres_url
    suite = tmp_path / "s.yaml"
    suite.write_text("suite: s\nentries:\n  - kind: estimate\n    workload: pretrain\n    model: llama2-7b\n"
                     "    hardware: 8xa800\n    grid:\n      zero: [0, 3]\n")
    run_cli("run", str(suite), "--db", postgres_url, check=True)
    again = run_cli("run", str(suite), "--db", postgres_url, "--resume", "--json", check=True)
    assert json.loads(again.stdout)["metrics"]["total"] == 2
    listed = json.loads(run_cli("results", "list", "--db", postgres_url, "--json", check=True).stdout)
    assert sorted(r["config"]["zero"] for r in listed) == [0, 3]  # each point once: --resume read the server
    with open_existing(postgres_url) as store:
        assert store.count() == 2


def test_server_errors_are_one_line(postgres_server, tmp_path):
    gone = f"postgresql://llmd:secret@127.0.0.1:{postgres_server.port + 1 if postgres_server.port < 65535 else 1}/x"
    proc = run_cli("results", "list", "--db", gone)
    assert_user_error(proc, "cannot connect to results database")
    assert "secret" not in proc.stderr  # the password is never shown
    import psycopg

    foreign = postgres_server.new_database()
    with psycopg.connect(foreign, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (x int)")
    assert_user_error(run_cli("results", "list", "--db", foreign), "not a llm-dissect results store")


def test_compare_a_file_with_a_server_store(postgres_url, tmp_path):
    from test_report_render import train

    with open_store(tmp_path / "a.db") as store:
        store.add(train(step=1.0, seed=1))
    with open_store(postgres_url) as store:
        store.add(train(step=1.3, seed=3))
    out = json.loads(run_cli("compare", str(tmp_path / "a.db"), postgres_url, "--json", check=True).stdout)
    step = next(r for r in out["rows"] if r["metric"] == "step_time_s")
    assert step["ratio"] == pytest.approx(1.3, rel=0.05) and step["verdict"] == "beyond noise"


def test_the_server_gone_under_a_running_suite_keeps_the_running_points_record(postgres_server, tmp_path):
    from test_store_faults import SLOW_MIDDLE, last_line
    from tests.postgres_server import start_postgres

    server = start_postgres()  # one of its own, to stop in the middle
    try:
        url = server.new_database()
        suite = tmp_path / "slow.yaml"
        suite.write_text(SLOW_MIDDLE)
        proc = subprocess.Popen([sys.executable, "-m", "llmdissect", "run", str(suite), "--db", url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with open_store(url) as store:
            while store.count() == 0:  # the first point recorded: the slow one is running
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
        server.stop()
        _, err = proc.communicate(timeout=120)
    finally:
        server.stop()
    assert proc.returncode == 2 and "Traceback" not in err, err[-2000:]
    line = last_line(err)
    assert line.startswith("error: cannot write to results database postgresql://") and "was kept in" in line, line
    kept = list((tmp_path / "state" / "records").glob("point-*.records.jsonl"))  # the state folder: no file beside
    assert len(kept) == 1 and json.loads(kept[0].read_text())["config"]["suite_entry"] == "running"
