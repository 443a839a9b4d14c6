import json
import sqlite3
import threading
from pathlib import Path

import pandas as pd
import pytest

from llmdissect import load_results
from llmdissect.errors import UserError
from llmdissect.measure import Stats
from llmdissect.results import RunRecord, open_store
from llmdissect.results.export import export_records
from llmdissect.results.store import SCHEMA_VERSION, check_writable


def make_record(i: int = 0, **kw) -> RunRecord:
    return RunRecord(kind="pretrain", config={"model": "debug-llama", "micro_batch": i},
                     metrics={"step_time_s": Stats.of([0.1 + i, 0.2 + i, 0.3 + i]).to_dict(),
                              "tokens_per_s": 100.0 + i},
                     **kw).finish()


def test_add_get_query(db_path: Path):
    with open_store(db_path) as store:
        ids = [store.add(make_record(i)) for i in range(3)]
        store.add(RunRecord(kind="estimate", source="estimated").finish())
        assert store.count() == 4
        assert store.get(ids[1]).config["micro_batch"] == 1
        assert store.get(ids[1][:8]).id == ids[1]
        assert [r.config["micro_batch"] for r in store.query(kind="pretrain")] == [0, 1, 2]
        assert len(store.query(limit=2)) == 2
        assert store.query(ids=[ids[0]])[0].id == ids[0]
        with pytest.raises(UserError, match="no run"):
            store.get("zzzz")


def test_schema_version_and_wal(db_path: Path):
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_record_json_has_the_documented_fields():
    d = make_record().to_dict()
    for key in ("id", "kind", "source", "status", "config", "env", "metrics", "error", "started_at",
                "finished_at", "version"):
        assert key in d
    json.dumps(d, allow_nan=False)


def test_nan_becomes_null():
    r = RunRecord(kind="ops", metrics={"x": float("nan")})
    assert r.to_dict()["metrics"]["x"] is None


def test_invalid_kind_rejected():
    with pytest.raises(ValueError):
        RunRecord(kind="bogus")


def test_corrupted_file_is_left_untouched(tmp_path: Path):
    bad = tmp_path / "results.db"
    payload = b"this is not a database" * 100
    bad.write_bytes(payload)
    with pytest.raises(UserError, match="not a llm-dissect results database"):
        open_store(bad)
    assert bad.read_bytes() == payload


def test_damaged_sqlite_is_left_untouched(db_path: Path):
    with open_store(db_path) as store:
        store.add(make_record())
    data = bytearray(db_path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # keep the header, wreck the schema page
    db_path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
    with pytest.raises(UserError):
        open_store(db_path)
    assert db_path.read_bytes() == bytes(data)


def test_foreign_sqlite_is_refused(tmp_path: Path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE customers (x)")
    conn.commit()
    conn.close()
    with pytest.raises(UserError, match="not a llm-dissect results database"):
        open_store(other)


def test_unwritable_paths(tmp_path: Path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    with pytest.raises(UserError):
        check_writable(a_file / "results.db")  # parent is a file
    with pytest.raises(UserError):
        check_writable(tmp_path)  # a directory
    with pytest.raises(UserError):
        check_writable("/proc/llmdissect/results.db")


def test_export_formats_and_frame(db_path: Path, tmp_path: Path):
    with open_store(db_path) as store:
        for i in range(3):
            store.add(make_record(i))
        records = store.query()
    assert export_records(records, "jsonl", tmp_path / "r.jsonl") == 3
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert json.loads(lines[2])["config"]["micro_batch"] == 2
    export_records(records, "csv", tmp_path / "r.csv")
    frame = pd.read_csv(tmp_path / "r.csv")
    assert list(frame["metrics.step_time_s.median"]) == pytest.approx([0.2, 1.2, 2.2])
    export_records(records, "parquet", tmp_path / "r.parquet")
    assert len(pd.read_parquet(tmp_path / "r.parquet")) == 3
    with pytest.raises(UserError, match="unknown export format"):
        export_records(records, "xlsx", tmp_path / "r.xlsx")
    df = load_results(db_path, kind="pretrain")
    assert len(df) == 3 and "config.model" in df.columns and "metrics.tokens_per_s" in df.columns
    assert "metrics.step_time_s.samples" not in df.columns


def test_load_results_missing_db(tmp_path: Path):
    with pytest.raises(UserError, match="not found"):
        load_results(tmp_path / "none.db")


def test_a_server_url_survives_the_path_it_travels_in():
    from llmdissect.results.location import server_url, shown

    url = "postgresql://team:pw@db.example:5432/results?sslmode=require"
    assert server_url(Path(url)) == url  # --db is a Path on the command line: `//` folded to `/`
    assert server_url("postgres://h/db") == "postgresql://h/db"
    assert server_url(Path("results.db")) is None and server_url(None) is None
    assert shown(url) == "postgresql://team:***@db.example:5432/results?sslmode=require"


def test_a_server_store_without_psycopg_is_one_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the postgres extra were not installed
    with pytest.raises(UserError, match=r"needs psycopg: pip install 'llm-dissect\[postgres\]'"):
        open_store("postgresql://someone:pw@127.0.0.1:1/results")


def test_opening_waits_out_a_writer_sqlite_would_not_wait_for(db_path: Path):
    # A file in rollback mode with a write open elsewhere: switching it to WAL reads, then wants
    # to write, and SQLite answers "locked" at once rather than wait (a possible deadlock). Eight
    # writers opening a new file together meet this; opening must try again, not fail.
    open_store(db_path).close()
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA journal_mode = DELETE")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO schema_version SELECT version FROM schema_version")
    other.execute("DELETE FROM schema_version WHERE rowid = (SELECT MAX(rowid) FROM schema_version)")
    threading.Timer(0.5, lambda: other.execute("COMMIT")).start()
    with open_store(db_path) as store:
        store.add(make_record(1))
        assert store.count() == 1
    other.close()
