"""The SQL of the store's reads, one text for the SQLite file and the PostgreSQL server.

Only the parameter mark (`?` or `%s`) and the column that keeps insertion order (SQLite's
`rowid`, PostgreSQL's `seq`) differ between the two.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Filters:
    """What `ResultStore.query` selects on; None means any."""

    kind: str | None = None
    suite: str | None = None
    status: str | None = None
    since: str | None = None
    """ISO time: records started at or after it."""
    ids: Iterable[str] | None = None
    limit: int | None = None
    """The newest N (still returned oldest first)."""
    source: str | None = None
    offset: int = 0
    """With `limit`: skip the newest `offset` first (pages of `results list`)."""


BULKY_METRICS = ("rows", "top_ops", "points")
"""Per-row tables of a record's metrics (ops and comm rows, dissect's operators, a validation's
points): most of a store's bytes, needed only for the latest run of a point."""


def light_column(dialect: str) -> str:
    """record_json without BULKY_METRICS, cut by the database before Python parses it."""
    if dialect == "sqlite":
        return "json_remove(record_json, " + ", ".join(f"'$.metrics.{k}'" for k in BULKY_METRICS) + ")"
    return "(record_json::jsonb " + " ".join(f"#- '{{metrics,{k}}}'" for k in BULKY_METRICS) + ")::text"


def select_records_sql(f: Filters, mark: str, order_column: str,
                       selected: str = "record_json") -> tuple[str, list, bool]:
    """(sql, args, newest_first): with a limit the rows come newest first, to be reversed."""
    where, args = [], []
    for column, value in (("kind", f.kind), ("suite", f.suite), ("status", f.status), ("source", f.source)):
        if value is not None:
            where.append(f"{column} = {mark}")
            args.append(value)
    if f.since is not None:
        where.append(f"started_at >= {mark}")
        args.append(f.since)
    if f.ids is not None:
        ids = list(f.ids)
        where.append(f"id IN ({','.join([mark] * len(ids))})" if ids else "1 = 0")
        args.extend(ids)
    sql = f"SELECT {selected} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    if f.limit is None:
        return sql + f" ORDER BY started_at, {order_column}", args, False
    page = f" LIMIT {int(f.limit)}" + (f" OFFSET {int(f.offset)}" if f.offset else "")
    return sql + f" ORDER BY started_at DESC, {order_column} DESC" + page, args, True


def get_record_sql(mark: str) -> str:
    """A run by its id or a unique prefix of it."""
    return f"SELECT record_json FROM runs WHERE id = {mark} OR id LIKE {mark}"


RUN_COLUMNS = "id, kind, source, status, suite, started_at, finished_at, version, record_json"


def record_row(record) -> tuple:
    """A RunRecord as the values of RUN_COLUMNS."""
    return (record.id, record.kind, record.source, record.status, record.suite, record.started_at,
            record.finished_at, record.version, record.to_json())
