"""`llmdissect compare A B`: two runs, two suites or two stores (files or server URLs), side by side."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from llmdissect.cli.options import DbOpt, DbPath, JsonOpt
from llmdissect.errors import UserError


def resolve(side: str, db: Path | None) -> tuple[list, str, bool]:
    """(records, name, is_single_run): a store file, else a suite of --db, else a run id of --db."""
    from llmdissect.results.location import server_url
    from llmdissect.results.store import open_existing

    path = Path(side)
    if server_url(side) or path.suffix in (".db", ".sqlite", ".sqlite3") or path.is_file():
        with open_existing(side) as store:
            records = store.query()
        if not records:
            raise UserError(f"results database {store.path} holds no records")
        return records, Path(str(store.path)).name, False
    with open_existing(db) as store:
        records = store.query(suite=side)
        if records:
            return records, f"suite {side}", False
        try:
            return [store.get(side)], f"run {side}", True
        except UserError:
            raise UserError(f"{side!r} is neither a results database file, a suite nor a run id in "
                            f"{store.path}") from None


def compare(a: str = typer.Argument(..., help="Run id, suite name or results database (file or postgresql:// URL)."),
            b: str = typer.Argument(..., help="Run id, suite name or results database (file or postgresql:// URL)."),
            db: DbPath = DbOpt,
            out: Optional[Path] = typer.Option(None, "--out", "-o",
                                               help="Also write report.html/report.md with the comparison here."),
            json_out: bool = JsonOpt) -> None:
    """The same configurations of A and B side by side: B / A and whether it is beyond the noise."""
    from llmdissect.analysis import findings
    from llmdissect.analysis.compare import HEADLINES, Pair, compare_rows, describe, difference, pair_records
    from llmdissect.console import console, print_json, table

    ra, name_a, single_a = resolve(a, db)
    rb, name_b, single_b = resolve(b, db)
    if single_a and single_b:  # two runs named on purpose: compare them even if their configs differ
        x, y = ra[0], rb[0]
        if x.kind != y.kind:
            raise UserError(f"cannot compare a {x.kind} run with a {y.kind} run")
        if x.kind not in HEADLINES or "ok" not in (x.status, y.status) or x.status != y.status:
            raise UserError(f"runs {x.id} ({x.status}) and {y.id} ({y.status}) are not both ok runs of a "
                            f"comparable kind")
        diffs = [d for m, _ in HEADLINES[x.kind] if (d := difference(m, x.metrics, y.metrics))]
        pairs = [Pair(f"{describe(x)} / {describe(y)}" if describe(x) != describe(y) else describe(x), x.kind, x, y,
                      diffs)]
    else:
        pairs = pair_records(ra, rb)
    rows = compare_rows(pairs)
    sentences = findings.comparison(rows, name_a, name_b)
    if out is not None:
        from llmdissect.report.build import Report, compare_section, write_report

        sec = compare_section(ra, rb, name_a, name_b) if not (single_a and single_b) else None
        if sec is None:
            from llmdissect.report.section import Section, Table

            sec = Section("compare", f"Comparison: {name_a} against {name_b}", findings=sentences,
                          tables=[Table("Side by side", ["configuration", "metric", "A", "B", "B / A", "p", "verdict"],
                                        [(*r[:4], r[4] and f"{r[4]:.3f}x", r[5], r[6]) for r in rows])])
        html, _ = write_report(Report(f"llm-dissect: {name_a} against {name_b}", "comparison", [sec]), out)
    if json_out:
        print_json({"a": name_a, "b": name_b, "findings": sentences,
                    "rows": [dict(zip(("configuration", "metric", "a", "b", "ratio", "p_value", "verdict"), r))
                             for r in rows]})
        return
    from rich.markup import escape  # names from records are text, never rich markup

    shown = [tuple(escape(v) if isinstance(v, str) else v for v in r) for r in rows]
    console.print(table(escape(f"{name_a} (A) against {name_b} (B)"), ["configuration", "metric", "A", "B", "B / A",
                                                                       "p", "verdict"], shown, justify_numbers=False))
    for s in sentences:
        console.print(s, markup=False)
    if out is not None:
        console.print(f"report: {html}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("compare")(compare)
