"""`llmdissect results list|show|export|import`: read the results store, merge per-job record files."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from llmdissect.cli.options import DbOpt, DbPath, JsonOpt
from llmdissect.console import console, format_value, print_json, table

results_app = typer.Typer(no_args_is_help=True, help="List, show and export stored run records.")


def _headline(metrics: dict) -> str:
    """The first few scalar metrics of a record, for the list view."""
    parts = []
    for key, value in metrics.items():
        if isinstance(value, dict) and "median" in value:
            value = value["median"]
            key += "~"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{key}={format_value(float(value))}")
        if len(parts) == 3:
            break
    return " ".join(parts)


@results_app.command("list")
def list_cmd(db: DbPath = DbOpt, kind: Optional[str] = typer.Option(None, help="Only this kind."),
             suite: Optional[str] = typer.Option(None, help="Only this suite."),
             status: Optional[str] = typer.Option(None, help="Only this status."),
             limit: Optional[int] = typer.Option(50, help="The most recent N (0 for all): one page."),
             page: int = typer.Option(1, "--page", min=1, help="Page N: the N-th most recent LIMIT records."),
             json_out: bool = JsonOpt) -> None:
    """List stored records, oldest first (the newest page; --page 2 for the one before)."""
    from llmdissect.errors import UserError
    from llmdissect.results.store import open_existing

    if page > 1 and not limit:
        raise UserError("--page needs a --limit above 0 (the page size)")
    with open_existing(db) as store:
        records = store.query(kind=kind, suite=suite, status=status, limit=limit or None,
                              offset=(page - 1) * (limit or 0))
    if json_out:
        print_json([r.to_dict() for r in records])
        return
    rows = [(r.id, r.kind, r.source, r.status, r.suite or "", r.config.get("model", ""), r.started_at[:19],
             _headline(r.metrics)) for r in records]
    console.print(table(f"{len(records)} record(s) in {store.path}" + (f", page {page}" if page > 1 else ""),
                        ["id", "kind", "source", "status", "suite", "model", "started (UTC)", "metrics"], rows,
                        justify_numbers=False))


@results_app.command("show")
def show(run_id: str = typer.Argument(..., help="A run id (or a unique prefix)."), db: DbPath = DbOpt,
         json_out: bool = JsonOpt) -> None:
    """Show one record whole."""
    from llmdissect.results.frame import flatten
    from llmdissect.results.store import open_existing

    with open_existing(db) as store:
        record = store.get(run_id)
    if json_out:
        print_json(record.to_dict())
        return
    head = [(k, getattr(record, k)) for k in ("id", "kind", "source", "status", "suite", "started_at",
                                              "finished_at", "version", "error")]
    console.print(table(f"Run {record.id}", ["field", "value"], head, justify_numbers=False))
    console.print(table("config", ["key", "value"], flatten(record.config).items(), justify_numbers=False))
    console.print(table("metrics", ["metric", "value"], flatten(record.metrics).items(), justify_numbers=False))


@results_app.command("export")
def export(out: Path = typer.Option(..., "--out", "-o", help="File to write."),
           fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl, csv or parquet."),
           db: DbPath = DbOpt, kind: Optional[str] = typer.Option(None, help="Only this kind."),
           suite: Optional[str] = typer.Option(None, help="Only this suite.")) -> None:
    """Export records (config and metrics flattened to columns for csv/parquet)."""
    from llmdissect.results.export import export_records
    from llmdissect.results.store import open_existing

    with open_existing(db) as store:
        records = store.query(kind=kind, suite=suite)
    n = export_records(records, fmt, out)
    console.print(f"wrote {n} record(s) to {out}")


@results_app.command("import")
def import_cmd(folder: Path = typer.Argument(..., help="A folder of per-job record files (*.records.jsonl), "
                                            "e.g. a Slurm suite's job folder."),
               db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Merge per-job record files into the store; a record already there is not added again,
    so a folder can be imported while its jobs still run, and again when they end."""
    from llmdissect.errors import UserError
    from llmdissect.results.jobfiles import import_folder
    from llmdissect.results.store import open_store

    if not folder.is_dir():
        raise UserError(f"not a folder: {folder}")
    with open_store(db) as store:
        outcome = import_folder(store, folder)
    if json_out:
        print_json({"folder": str(folder), "db": str(store.path), "files": outcome.files,
                    "records": outcome.records, "added": outcome.added})
        return
    console.print(f"{outcome.files} file(s), {outcome.records} record(s): {outcome.added} added to {store.path}, "
                  f"{outcome.records - outcome.added} already there")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
