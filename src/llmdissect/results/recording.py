"""Turning a finished run into a stored record: the one path every measured command takes."""
from __future__ import annotations

import os
from typing import Any

from llmdissect.child_result import ChildResult
from llmdissect.errors import UserError
from llmdissect.paths import default_db_path
from llmdissect.results.jobfiles import keep_refused
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store


def record_from_child(kind: str, config: dict[str, Any], child: ChildResult, env: dict[str, Any],
                      started_at: str | None = None) -> RunRecord:
    """A measured record: metrics from the child's result when it succeeded, else its status
    and error (an `oom`, `timeout` or `failed` run is a record too)."""
    record = RunRecord(kind=kind, source="measured", config=config, env=env)
    if started_at:
        record.started_at = started_at
    if child.status == "ok":
        result = dict(child.result or {})
        record.metrics = result.pop("metrics", result)
        if "env" in result:
            record.env = {**env, **result["env"]}
        return record.finish("ok")
    record.metrics = {"wall_s": child.wall_s}
    return record.finish(child.status, child.error)


def save(record: RunRecord, db: str | os.PathLike | None) -> RunRecord:
    """Store the record; when the store refuses it (disk full, made read-only) the record is
    kept in a per-job file beside the store and the UserError says where."""
    try:
        with open_store(db) as store:
            store.add(record)
    except UserError as e:
        kept = keep_refused(record, db if db is not None else default_db_path(), f"{record.kind}-{record.id}")
        raise UserError(f"{e}; {kept}") from None
    return record
