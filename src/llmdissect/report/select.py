"""Which records a report draws, and small accessors shared by the sections."""
from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from llmdissect.analysis.repeats import PointFolder, machine_label
from llmdissect.errors import UserError
from llmdissect.results.schema import RunRecord


def parse_since(text: str) -> str:
    """An ISO date/time, or a relative age like `2h`, `3d`, `30m` -> ISO timestamp (UTC)."""
    text = text.strip()
    units = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    if text[:-1].isdigit() and text[-1:].lower() in units:
        delta = timedelta(**{units[text[-1].lower()]: int(text[:-1])})
        return (datetime.now(timezone.utc) - delta).isoformat(timespec="milliseconds")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--since must be an ISO date/time (2026-12-02, 2026-12-02T13:00) or an age "
                        f"like 30m, 2h, 3d; got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def select_records(db: str | os.PathLike | None, *, suite: str | None = None, since: str | None = None,
                   ids: Iterable[str] | None = None) -> list[RunRecord]:
    """Records of the store matching the filters (ids may be unique prefixes); oldest first."""
    folder = _Keep()
    _stream(db, folder, suite=suite, since=since, ids=ids)
    return folder.records()


def select_points(db: str | os.PathLike | None, *, suite: str | None = None, since: str | None = None,
                  ids: Iterable[str] | None = None) -> tuple[list[RunRecord], int]:
    """(records, runs): the matching records with the repeats of each measured configuration
    folded into one point (analysis.repeats), read one record at a time; runs = how many
    records they came from."""
    folder = PointFolder()
    _stream(db, folder, suite=suite, since=since, ids=ids)
    return folder.records(), folder.runs


class _Keep:
    """A folder that keeps every record as it is."""

    def __init__(self) -> None:
        self.kept: list[RunRecord] = []
        self.add = self.kept.append

    def records(self) -> list[RunRecord]:
        return self.kept

    @property
    def runs(self) -> int:
        return len(self.kept)


def _stream(db, folder, *, suite: str | None, since: str | None, ids: Iterable[str] | None) -> None:
    from llmdissect.results.store import open_existing

    if (suite is not None) + (since is not None) + (ids is not None) > 1:
        raise UserError("give at most one of --suite, --since, --ids")
    with open_existing(db) as store:
        if ids is not None:
            wanted = [i.strip() for i in ids if i.strip()]
            if not wanted:
                raise UserError("--ids needs at least one run id")
            for r in sorted((store.get(i) for i in wanted), key=lambda r: r.started_at):
                folder.add(r)
        else:
            light = isinstance(folder, PointFolder)  # a point needs only its latest run whole
            for r in store.iter_query(suite=suite, since=parse_since(since) if since else None, light=light):
                folder.add(r)
            if light:
                folder.restore(store)
    if not folder.runs:
        what = f"suite {suite!r}" if suite else f"since {since}" if since else "the store"
        raise UserError(f"no records for {what} in {db or 'the default results database'}")


def machine(env: dict[str, Any]) -> str:
    """`2 x AMD EPYC (CPU)` or `8 x NVIDIA A800` for labels and findings."""
    return machine_label(env)


def ok(records: Iterable[RunRecord], *kinds: str, source: str = "measured") -> list[RunRecord]:
    return [r for r in records if r.kind in kinds and r.status == "ok" and r.source == source]


def by_machine(records: Iterable[RunRecord]) -> dict[str, list[RunRecord]]:
    out: dict[str, list[RunRecord]] = {}
    for r in records:
        out.setdefault(machine(r.env), []).append(r)
    return out
