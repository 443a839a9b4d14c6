"""The embedded results store: one SQLite file, WAL mode, versioned schema (or, for
`--db postgresql://...`, the same tables on a server: results/pg_store.py).

Each record is written in one transaction when its run ends, so a process killed at any
moment leaves every earlier record intact. A file that is not one of our databases is
never overwritten: opening it is a UserError.
"""
from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.paths import default_db_path
from llmdissect.results.location import server_url
from llmdissect.results.query import (
    RUN_COLUMNS,
    Filters,
    get_record_sql,
    light_column,
    record_row,
    select_records_sql,
)
from llmdissect.results.schema import RunRecord

SQLITE_HEADER = b"SQLite format 3\x00"
OPEN_WAIT_S = 30.0  # how long opening waits on other writers, as the busy timeout does

# Each entry moves the schema from version i to i + 1. Append, never edit.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        source TEXT NOT NULL,
        status TEXT NOT NULL,
        suite TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        version TEXT NOT NULL,
        record_json TEXT NOT NULL
    );
    CREATE INDEX runs_kind ON runs(kind);
    CREATE INDEX runs_suite ON runs(suite);
    CREATE INDEX runs_started ON runs(started_at);
    """,
    # reports and validate select on status and source (ok, measured) beside kind and suite
    """
    CREATE INDEX runs_status ON runs(status, source);
    CREATE INDEX runs_suite_started ON runs(suite, started_at);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class ResultStore:
    """Records in one SQLite file. Safe for concurrent writers (WAL + busy timeout)."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self._conn = conn
        self._inode = path.stat().st_ino

    # ---- writing --------------------------------------------------------------------
    def add(self, record: RunRecord) -> str:
        """Write one record in its own transaction; returns its id."""
        self._check_still_ours()
        try:
            with self._conn:
                self._conn.execute(f"INSERT OR REPLACE INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                                   record_row(record))
        except sqlite3.Error as e:
            raise UserError(f"cannot write to results database {self.path}: {e}") from None
        return record.id

    def add_new(self, records: list[RunRecord]) -> int:
        """Write the records whose id is not in the store yet, all in one transaction; returns
        how many were new. Importing the same records again adds nothing (a record id is
        stored once, whatever the number of imports)."""
        self._check_still_ours()
        rows = [record_row(r) for r in records]
        try:
            with self._conn:
                before = self._conn.total_changes
                self._conn.executemany(f"INSERT OR IGNORE INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", rows)
                return self._conn.total_changes - before
        except sqlite3.Error as e:
            raise UserError(f"cannot write to results database {self.path}: {e}") from None

    def _check_still_ours(self) -> None:
        """A store deleted or replaced while open would swallow writes into a file no one can
        read again (the open handle keeps the unlinked inode alive), and one made read-only
        while open would still take them through the old handle: refuse both."""
        try:
            same = self.path.stat().st_ino == self._inode
        except OSError:
            same = False
        if not same:
            raise UserError(f"results database {self.path} was deleted or replaced while in use")
        if not os.access(self.path, os.W_OK):
            raise UserError(f"results database {self.path} was made read-only while in use")

    # ---- reading --------------------------------------------------------------------
    def get(self, run_id: str) -> RunRecord:
        rows = self._conn.execute(get_record_sql("?"), (run_id, run_id + "%")).fetchall()
        return one_record(rows, run_id, self.path)

    def query(self, *, kind: str | None = None, suite: str | None = None, status: str | None = None,
              since: str | None = None, ids: Iterable[str] | None = None, limit: int | None = None,
              source: str | None = None, offset: int = 0) -> list[RunRecord]:
        """Records matching every filter given, oldest first (`limit`: the newest N, after the
        newest `offset`)."""
        sql, args, newest_first = select_records_sql(Filters(kind, suite, status, since, ids, limit, source, offset),
                                                     "?", "rowid")
        rows = self._conn.execute(sql, args).fetchall()
        return [RunRecord.from_dict(json.loads(r[0])) for r in (reversed(rows) if newest_first else rows)]

    def iter_query(self, *, kind: str | None = None, suite: str | None = None, status: str | None = None,
                   since: str | None = None, source: str | None = None, light: bool = False) -> Iterator[RunRecord]:
        """The records of `query`, oldest first, one at a time: a caller that folds them as they
        come (reports, validate) holds one record at a time, not the whole store. `light`: without
        the per-row tables of the metrics (query.BULKY_METRICS), cut by the database."""
        sql, args, _ = select_records_sql(Filters(kind, suite, status, since, None, None, source), "?", "rowid",
                                          light_column("sqlite") if light else "record_json")
        for (text,) in self._conn.execute(sql, args):
            yield RunRecord.from_dict(json.loads(text))

    def count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def one_record(rows: list, run_id: str, where: object) -> RunRecord:
    """The one record a `get` found, or a UserError (none, or an ambiguous prefix)."""
    if not rows:
        raise UserError(f"no run with id {run_id!r} in {where}")
    if len(rows) > 1:
        raise UserError(f"id prefix {run_id!r} matches {len(rows)} runs; give more characters")
    return RunRecord.from_dict(json.loads(rows[0][0]))


def _check_existing_file(path: Path) -> None:
    if path.is_dir():
        raise UserError(f"results database path is a directory: {path}")
    if path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
        if header != SQLITE_HEADER:
            raise UserError(f"{path} is not a llm-dissect results database (not SQLite); it was left untouched")


def _schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version (0: empty); a UserError for a file that is not ours or newer."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables and "schema_version" not in tables:
        raise UserError(f"{path} is an SQLite file but not a llm-dissect results database; it was left untouched")
    row = conn.execute("SELECT version FROM schema_version").fetchone() if tables else None
    current = row[0] if row else 0
    if current > SCHEMA_VERSION:
        raise UserError(f"{path} was written by a newer llm-dissect (schema {current} > {SCHEMA_VERSION})")
    return current


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the file to SCHEMA_VERSION. Writers that open a new file at once take turns
    under the write lock (BEGIN IMMEDIATE) and look again, so the tables are made once."""
    if _schema_version(conn, path) == SCHEMA_VERSION:
        return  # nothing to write: an up-to-date file opens read-only too
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = _schema_version(conn, path)
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        for sql in MIGRATIONS[current:]:
            for statement in filter(str.strip, sql.split(";")):
                conn.execute(statement)
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def open_store(path: str | os.PathLike | None = None) -> ResultStore:
    """Open (creating when needed) the store at `path` or the default location.

    Raises UserError for a path that cannot be written, a file that is not ours, or a
    corrupted database; none of these touches the file.
    """
    path = path if path is not None else default_db_path()
    if url := server_url(path):
        from llmdissect.results.pg_store import open_server_store

        return open_server_store(url)
    path = Path(path)
    _check_existing_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the folder of results database {path}: {e.strerror}") from None
    try:
        conn = _connect_when_free(path)
    except sqlite3.DatabaseError as e:
        raise UserError(f"cannot use results database {path}: {e}; the file was left untouched") from None
    return ResultStore(path, conn)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=OPEN_WAIT_S)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(OPEN_WAIT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, path)
        conn.execute("SELECT COUNT(*) FROM runs").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_when_free(path: Path) -> sqlite3.Connection:
    """Set up a connection, trying again while another writer holds the lock. SQLite answers
    "database is locked" at once, without the busy timeout, where waiting could deadlock: a
    connection that already reads (switching the file to WAL, say) and wants to write while
    another writes. Writers that open a new file together meet exactly that."""
    deadline = time.monotonic() + OPEN_WAIT_S
    while True:
        try:
            return _connect(path)
        except sqlite3.OperationalError as e:
            if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                raise
        time.sleep(random.uniform(0.01, 0.05))  # apart, so two that met do not meet again


def open_existing(path: str | os.PathLike | None = None) -> ResultStore:
    """Open a store that must already exist (for reading commands)."""
    path = path if path is not None else default_db_path()
    if server_url(path):
        return open_store(path)  # a server's store is created on first use, like a new file
    path = Path(path)
    if not path.exists():
        raise UserError(f"results database not found: {path} (run something first, or pass --db)")
    return open_store(path)


def check_writable(path: str | os.PathLike | None = None) -> Path | str:
    """Fail early (before any long run) when the store cannot be written. Returns the
    store's file path, or its server URL."""
    store = open_store(path)
    if not isinstance(store, ResultStore):
        with store:
            store.check_writable()
        return store.url
    try:
        with store._conn:
            store._conn.execute("CREATE TEMP TABLE IF NOT EXISTS _probe (x)")
        store._conn.execute("BEGIN IMMEDIATE")
        store._conn.execute("ROLLBACK")
    except sqlite3.Error as e:
        raise UserError(f"results database {store.path} is not writable: {e}") from None
    finally:
        store.close()
    return Path(store.path)
