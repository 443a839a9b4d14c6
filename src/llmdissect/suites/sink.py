"""Where a suite's records go as its points end: the store, or a per-job file.

On one host a record goes straight into the store (SQLite in WAL mode takes concurrent
writers there). A job on another host (`--records-dir`, what the Slurm job scripts pass)
writes a per-job JSONL file instead, merged later by the parent. When the store cannot
take a record (disk full, made read-only, deleted under the run) the record is kept in a
per-job file next to the store and the run stops with one line saying where it is.
"""
from __future__ import annotations

from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.paths import state_dir
from llmdissect.results.jobfiles import job_file_name, write_records_file
from llmdissect.results.location import server_url
from llmdissect.results.schema import RunRecord

FALLBACK_FOLDER = "records"
"""Folder next to the store (in the state folder for a server) that keeps the records the
store could not take."""


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
        name = job_file_name(f"point-{point_key}")
        if self._store is None:
            try:
                write_records_file(self.records_dir, name, [record])
            except OSError as e:
                raise UserError(f"cannot write the record of point {point_key[:8]} to {self.records_dir}: "
                                f"{e.strerror or e}") from None
            return
        try:
            self._store.add(record)
        except UserError as store_error:
            raise UserError(f"{store_error}; {self._keep(record, name)}") from None

    def _keep(self, record: RunRecord, name: str) -> str:
        """Keep the record the store refused in a per-job file; says where (or why not)."""
        folder = state_dir() / FALLBACK_FOLDER if server_url(self.store_path) \
            else Path(self.store_path).parent / FALLBACK_FOLDER
        try:
            path = write_records_file(folder, name, [record])
        except OSError as e:
            return f"the record of run {record.id} could not be kept in {folder} either: {e.strerror or e}"
        return f"the run stopped; record {record.id} was kept in {path} (`llmdissect results import {folder}`)"

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> RecordSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
