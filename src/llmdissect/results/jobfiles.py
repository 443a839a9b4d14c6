"""Records that travel: one JSONL file per job, written atomically, merged idempotently.

A job on another host never writes the shared SQLite file: SQLite's WAL mode needs every
writer on one host (its shared-memory index does not work over a network file system).
The job writes its records to `<folder>/<name>.records.jsonl` instead, under a temporary
name first and then renamed, so a reader sees the whole file or nothing (rename is atomic
on one file system, NFS included). `import_folder` merges the finished files into a store;
a record id is stored once however many times a folder is imported, so a suite can be
merged while its jobs still run and merged again when they end.
"""
from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.paths import state_dir
from llmdissect.results.location import server_url
from llmdissect.results.schema import RunRecord

SUFFIX = ".records.jsonl"
REFUSED_FOLDER = "records"
"""Folder beside the store file (in the state folder for a server store) that keeps the
records the store refused (disk full, store deleted or made read-only)."""


def job_file_name(stem: str) -> str:
    """A name no other job run takes: the stem, this host and this process."""
    return f"{stem}.{socket.gethostname()}-{os.getpid()}{SUFFIX}"


def write_records_file(folder: Path, name: str, records: Iterable[RunRecord]) -> Path:
    """Write the records as JSON lines to `folder/name`, atomically (temporary name, fsync,
    rename). Raises OSError when the folder cannot take the file; nothing half-written
    is ever left under the final name."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / name
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for record in records:
                f.write(record.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(folder)
    return final


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (a crash right after it keeps the file)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def refused_folder(store_location: str | os.PathLike) -> Path:
    if server_url(store_location):
        return state_dir() / REFUSED_FOLDER
    return Path(store_location).parent / REFUSED_FOLDER


def keep_refused(record: RunRecord, store_location: str | os.PathLike, stem: str) -> str:
    """Keep a record the store refused in a per-job file; returns the end of the error line
    that says where it is (or why it could not be kept either)."""
    folder = refused_folder(store_location)
    try:
        path = write_records_file(folder, job_file_name(stem), [record])
    except OSError as e:
        return f"record {record.id} could not be kept in {folder} either: {e.strerror or e}"
    return f"record {record.id} was kept in {path} (`llmdissect results import {folder}`)"


def read_records_file(path: Path) -> list[RunRecord]:
    """The records of one job file; a line that is not a record is a UserError naming it."""
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path} line {number} is not JSON ({e.msg}); nothing of this file was imported") \
                    from None
            if not isinstance(data, dict):
                raise UserError(f"{path} line {number} is not a run record; nothing of this file was imported")
            records.append(RunRecord.from_dict(data))
    return records


def records_files(folder: Path) -> list[Path]:
    """The finished job files of a folder (temporary files of running jobs left out)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"not a folder: {folder}")
    return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith("."))


def read_folder(folder: Path) -> list[RunRecord]:
    """Every record of every finished job file in the folder (missing folder: none)."""
    if not Path(folder).is_dir():
        return []
    return [r for path in records_files(folder) for r in read_records_file(path)]


@dataclass
class ImportOutcome:
    files: int
    records: int
    added: int
    """Records whose id was not in the store before (the others were imported earlier)."""


def import_folder(store, folder: Path) -> ImportOutcome:
    """Merge every finished job file of `folder` into `store`, one transaction per file."""
    files = records_files(folder)
    seen = added = 0
    for path in files:
        records = read_records_file(path)
        seen += len(records)
        added += store.add_new(records)
    return ImportOutcome(len(files), seen, added)
