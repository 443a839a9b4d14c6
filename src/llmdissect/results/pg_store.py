"""The results store on a PostgreSQL server (`--db postgresql://user@host/name`), for teams
that share results across machines: the same tables, the same migrations and the same
queries as the SQLite file (results/query.py), through psycopg (the `postgres` extra).

Each record is written in its own transaction, as with SQLite; the server takes writers on
any number of hosts. A `seq` column (an identity) keeps insertion order, which SQLite's
rowid keeps for the file.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from llmdissect.errors import UserError
from llmdissect.results.location import shown
from llmdissect.results.query import (
    RUN_COLUMNS,
    Filters,
    get_record_sql,
    light_column,
    record_row,
    select_records_sql,
)
from llmdissect.results.schema import RunRecord

MIGRATION_LOCK = 7_210_421
"""Advisory lock id: writers that open a new server store at once migrate one at a time."""

VALUES = ",".join(["%s"] * len(RUN_COLUMNS.split(",")))


class ServerStore:
    """Records in a PostgreSQL database; the same methods as `store.ResultStore`."""

    def __init__(self, url: str, conn: Any):
        self.url = url
        self.path = shown(url)  # what messages show (never the password)
        self._conn = conn

    def add(self, record: RunRecord) -> str:
        """Write one record in its own transaction (replacing one with its id); returns its id."""
        sql = (f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({VALUES}) ON CONFLICT (id) DO UPDATE SET "
               + ", ".join(f"{c.strip()} = EXCLUDED.{c.strip()}" for c in RUN_COLUMNS.split(",")[1:]))
        self._write(lambda cur: cur.execute(sql, record_row(record)))
        return record.id

    def add_new(self, records: list[RunRecord]) -> int:
        """Write the records whose id is not stored yet, in one transaction; returns how many."""
        sql = f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({VALUES}) ON CONFLICT (id) DO NOTHING"
        added = 0

        def insert(cur) -> None:
            nonlocal added
            for record in records:
                cur.execute(sql, record_row(record))
                added += cur.rowcount
        self._write(insert)
        return added

    def _write(self, work) -> None:
        import psycopg

        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                work(cur)
        except psycopg.Error as e:
            raise UserError(f"cannot write to results database {self.path}: {_first_line(e)}") from None

    def get(self, run_id: str) -> RunRecord:
        from llmdissect.results.store import one_record

        rows = self._read(get_record_sql("%s"), (run_id, run_id + "%"))
        return one_record(rows, run_id, self.path)

    def query(self, *, kind: str | None = None, suite: str | None = None, status: str | None = None,
              since: str | None = None, ids: Iterable[str] | None = None, limit: int | None = None,
              source: str | None = None, offset: int = 0) -> list[RunRecord]:
        """Records matching every filter given, oldest first (`limit`: the newest N, after the
        newest `offset`)."""
        sql, args, newest_first = select_records_sql(Filters(kind, suite, status, since, ids, limit, source, offset),
                                                     "%s", "seq")
        rows = self._read(sql, args)
        return [RunRecord.from_dict(json.loads(r[0])) for r in (reversed(rows) if newest_first else rows)]

    def iter_query(self, *, kind: str | None = None, suite: str | None = None, status: str | None = None,
                   since: str | None = None, source: str | None = None, light: bool = False) -> Iterator[RunRecord]:
        """The records of `query`, oldest first, one at a time (rows are fetched in one read:
        psycopg's client cursor holds them; the parsed records are not all kept). `light`: without
        the per-row tables of the metrics (query.BULKY_METRICS), cut by the server."""
        sql, args, _ = select_records_sql(Filters(kind, suite, status, since, None, None, source), "%s", "seq",
                                          light_column("postgresql") if light else "record_json")
        for (text,) in self._read(sql, args):
            yield RunRecord.from_dict(json.loads(text))

    def count(self) -> int:
        return self._read("SELECT COUNT(*) FROM runs", ())[0][0]

    def _read(self, sql: str, args) -> list:
        import psycopg

        try:
            with self._conn.cursor() as cur:
                return cur.execute(sql, args).fetchall()
        except psycopg.Error as e:
            raise UserError(f"cannot read results database {self.path}: {_first_line(e)}") from None

    def check_writable(self) -> None:
        """The role may insert into the runs table (asked of the server, nothing written)."""
        if not self._read("SELECT has_table_privilege('runs', 'INSERT')", ())[0][0]:
            raise UserError(f"results database {self.path} is not writable: no INSERT right on its runs table")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ServerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def open_server_store(url: str) -> ServerStore:
    """Connect to the server (creating the tables on first use); UserError when psycopg is
    missing, the server cannot be reached, or its database holds tables that are not ours."""
    try:
        import psycopg
    except ImportError:
        raise UserError(f"--db {shown(url)} needs psycopg: pip install 'llm-dissect[postgres]'") from None
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as e:
        raise UserError(f"cannot connect to results database {shown(url)}: {_first_line(e)}") from None
    try:
        _migrate(conn, shown(url))
    except psycopg.Error as e:
        conn.close()
        raise UserError(f"cannot use results database {shown(url)}: {_first_line(e)}") from None
    except UserError:
        conn.close()
        raise
    return ServerStore(url, conn)


def _migrate(conn: Any, where: str) -> None:
    from llmdissect.results.store import MIGRATIONS, SCHEMA_VERSION

    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        tables = {r[0] for r in cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
        if "runs" in tables and "schema_version" not in tables:
            raise UserError(f"{where} has a runs table that is not a llm-dissect results store; it was left untouched")
        cur.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = cur.execute("SELECT version FROM schema_version").fetchone()
        current = row[0] if row else 0
        if current > SCHEMA_VERSION:
            raise UserError(f"{where} was written by a newer llm-dissect (schema {current} > {SCHEMA_VERSION})")
        for sql in MIGRATIONS[current:]:
            for statement in filter(str.strip, sql.split(";")):
                cur.execute(statement)
        cur.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS seq BIGINT GENERATED ALWAYS AS IDENTITY")
        if row is None:
            cur.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION,))
        else:
            cur.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
