"""Records as a pandas DataFrame, config and metrics flattened to columns."""
from __future__ import annotations

import os
from typing import Any

from llmdissect.results.schema import RunRecord


def flatten(data: dict[str, Any], prefix: str = "", keep_samples: bool = False) -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; raw sample lists are dropped unless asked for."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + ".", keep_samples))
        elif isinstance(value, list) and not keep_samples and (key == "samples" or len(value) > 16):
            continue
        elif isinstance(value, list):
            out[name] = repr(value) if any(isinstance(v, (dict, list)) for v in value) else value
        else:
            out[name] = value
    return out


def record_row(record: RunRecord) -> dict[str, Any]:
    row = {k: getattr(record, k) for k in ("id", "kind", "source", "status", "suite", "started_at",
                                             "finished_at", "version", "error")}
    row.update(flatten(record.config, "config."))
    row.update(flatten(record.metrics, "metrics."))
    return row


def load_results(db: str | os.PathLike | None = None, **filters: Any):
    """A DataFrame of the store's records (filters as `ResultStore.query`)."""
    import pandas as pd

    from llmdissect.results.store import open_existing

    with open_existing(db) as store:
        records = store.query(**filters)
    return pd.DataFrame([record_row(r) for r in records])
