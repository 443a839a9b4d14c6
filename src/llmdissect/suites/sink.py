"""Where a suite's records go as its points end: the store, or a per-job file.

On one host a record goes straight into the store (SQLite in WAL mode takes concurrent
writers there). A job on another host (`--records-dir`, what the Slurm job scripts pass)
writes a per-job JSONL file instead, merged later by the parent. When the store cannot
take a record (disk full, made read-only, deleted under the run) the record is kept in a
per-job file beside the store (results/jobfiles.py: keep_refused) and the run stops with
one line saying where it is.
"""
from __future__ import annotations

from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.results.jobfiles import job_file_name, keep_refused, write_records_file
from llmdissect.results.schema import RunRecord


class RecordSink:
    """Takes each record as its point ends; `close` when the run is over."""

    def __init__(self, store_path: Path | None, records_dir: Path | None):
        self.store_path = store_path
        self.records_dir = records_dir
        self._store = None
        if records_dir is None:
            from llmdissect.results.store import open_store

            self._store = open_store(store_path)

    def add(self, record: RunRecord, point_key: str) -> None:
        if self._store is None:
            try:
                write_records_file(self.records_dir, job_file_name(f"point-{point_key}"), [record])
            except OSError as e:
                raise UserError(f"cannot write the record of point {point_key[:8]} to {self.records_dir}: "
                                f"{e.strerror or e}") from None
            return
        try:
            self._store.add(record)
        except UserError as store_error:
            kept = keep_refused(record, self.store_path, f"point-{point_key}")
            raise UserError(f"{store_error}; the run stopped; {kept}") from None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> RecordSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
