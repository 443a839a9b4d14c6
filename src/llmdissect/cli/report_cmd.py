"""`llmdissect report`: a self-contained HTML report and a Markdown report of stored records."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from llmdissect.cli.options import DbOpt, DbPath


def report(out: Path = typer.Option(..., "--out", "-o", help="Folder to write report.html, report.md and plots/ into."),
           db: DbPath = DbOpt,
           suite: Optional[str] = typer.Option(None, "--suite", help="Only the records of this suite."),
           since: Optional[str] = typer.Option(None, "--since",
                                               help="Only records started since: an ISO date/time or an age (2h, 3d)."),
           ids: Optional[str] = typer.Option(None, "--ids",
                                             help="Only these run ids (comma-separated; prefixes work)."),
           title: str = typer.Option("llm-dissect report", "--title", help="Title of the report."),
           estimate_missing: bool = typer.Option(True, "--estimate-missing/--no-estimate-missing",
                                                 help="Estimate measured CPU runs of this machine that have no "
                                                      "stored estimate (labelled as made at report time)."),
           runs: bool = typer.Option(False, "--runs", help="Also a table row per run; elsewhere the repeats of a "
                                     "configuration on one machine are one point (count, median, 95 % interval).")
           ) -> None:
    """Write report.html (one file, plots inline, opens offline) and report.md (plots beside it)."""
    from llmdissect.console import console
    from llmdissect.report.build import make_report
    from llmdissect.report.select import select_points

    records, n_runs = select_points(db, suite=suite, since=since, ids=ids.split(",") if ids is not None else None)
    what = f"suite {suite}" if suite else f"since {since}" if since else f"{n_runs} chosen run(s)" if ids \
        else "all records"
    html, md = make_report(records, out, title=title,
                           subtitle=f"{n_runs} record(s) as {len(records)} point(s): {what}",
                           estimate_missing=estimate_missing, runs=runs)
    console.print(f"report: {html}")
    console.print(f"markdown: {md}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("report")(report)
