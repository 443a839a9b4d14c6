"""`llmdissect run quick`: the built-in quick suite, the tool's main job."""
from __future__ import annotations

import typer

from llmdissect.cli.options import DbOpt, DbPath


def run_suite(
    suite: str = typer.Argument("quick", help="Suite to run: 'quick'."),
    db: DbPath = DbOpt,
    only: str = typer.Option("", help="Comma-separated step names to run (default: all)."),
) -> None:
    """Run a suite of benchmarks on this machine and store every record."""
    from llmdissect.suites.quick import run_quick

    if suite != "quick":
        from llmdissect.errors import UserError

        raise UserError(f"unknown suite {suite!r}; built-in suites: quick")
    failed = run_quick(db, only=[s for s in only.split(",") if s])
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run_suite)
