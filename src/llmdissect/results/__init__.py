"""Run records and the embedded SQLite store that keeps them."""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from llmdissect.results.schema import KINDS, SOURCES, STATUSES, RunRecord
from llmdissect.results.store import ResultStore, open_store

if TYPE_CHECKING:
    import pandas


def load(db: str | os.PathLike | None = None, *, kind: str | None = None, suite: str | None = None,
         status: str | None = None, since: str | None = None, ids: Iterable[str] | None = None,
         limit: int | None = None) -> pandas.DataFrame:
    """The store's records as a pandas DataFrame, oldest first: one row per record, with the
    columns id, kind, source, status, suite, started_at, finished_at, version, error and the
    config and metrics flattened (`config.zero`, `metrics.step_time_s.median`; raw sample
    lists left out).

    Args:
        db: the results store (default: $LLMDISSECT_DB or .llmdissect/results.db).
        kind, suite, status, since, ids, limit: keep only the records matching every filter
            given (`since`: an ISO time; `limit`: the newest N), as `ResultStore.query`.

    Raises:
        llmdissect.errors.UserError: the store does not exist or is not one of ours.
    """
    from llmdissect.results.frame import load_results

    return load_results(db, kind=kind, suite=suite, status=status, since=since, ids=ids, limit=limit)


__all__ = ["RunRecord", "KINDS", "SOURCES", "STATUSES", "ResultStore", "open_store", "load"]
