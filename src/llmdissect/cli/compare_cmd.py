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


def split_store(db: Path | None, since: str | None, rev: str | None) -> tuple[list, list, str, str]:
    """(A, B, name A, name B) of one store split in time (--since) or by git revision (--rev A..B),
    each side with the repeats of a configuration folded into one point (median across runs)."""
    from llmdissect.analysis.repeats import PointFolder
    from llmdissect.report.select import parse_since
    from llmdissect.results.store import open_existing

    if (since is None) == (rev is None):
        raise UserError("give A and B, or one of --since DATE and --rev A..B")
    if rev is not None:
        ra, _, rb = rev.partition("..")
        if not ra or not rb:
            raise UserError(f"--rev wants two git revisions (prefixes work) as A..B; got {rev!r}")
        names = (f"revision {ra}", f"revision {rb}")
    else:
        cut = parse_since(since)
        names = (f"before {cut[:16]}", f"since {cut[:16]}")
    left, right = PointFolder(), PointFolder()
    with open_existing(db) as store:
        for r in store.iter_query(status="ok", light=True):
            if rev is not None:
                got = str(r.env.get("git_revision") or "")
                side = left if got and got.startswith(ra) else right if got and got.startswith(rb) else None
            else:
                side = left if r.started_at < cut else right
            if side is not None:
                side.add(r)
        left.restore(store)
        right.restore(store)
    if not left.runs or not right.runs:
        raise UserError(f"no ok records {names[0] if not left.runs else names[1]} in "
                        f"{db or 'the default results database'}")
    return left.records(), right.records(), *names


def compare(a: Optional[str] = typer.Argument(None, help="Run id, suite name or results database (file or "
                                              "postgresql:// URL); none with --since or --rev."),
            b: Optional[str] = typer.Argument(None, help="Run id, suite name or results database (file or "
                                              "postgresql:// URL)."),
            since: Optional[str] = typer.Option(None, "--since", help="Instead of A and B: the store's records "
                                                "before this date/time (or age: 3d) against those since."),
            rev: Optional[str] = typer.Option(None, "--rev", help="Instead of A and B: records of git revision A "
                                              "against revision B, as A..B (prefixes work)."),
            db: DbPath = DbOpt,
            out: Optional[Path] = typer.Option(None, "--out", "-o",
                                               help="Also write report.html/report.md with the comparison here."),
            json_out: bool = JsonOpt) -> None:
    """The same configurations of A and B side by side: B / A and whether it is beyond the noise
    (with --since / --rev: what got slower; repeats of a configuration are one point)."""
    from llmdissect.analysis import findings
    from llmdissect.analysis.compare import HEADLINES, Pair, compare_rows, describe, difference, pair_records
    from llmdissect.console import console, print_json, table

    if a is None and b is None:
        ra, rb, name_a, name_b = split_store(db, since, rev)
        single_a = single_b = False
    elif a is None or b is None or since is not None or rev is not None:
        raise UserError("give A and B, or one of --since DATE and --rev A..B")
    else:
        from llmdissect.analysis.repeats import fold

        ra, name_a, single_a = resolve(a, db)
        rb, name_b, single_b = resolve(b, db)
        if not (single_a and single_b):  # the repeats of a configuration on a side are one point
            ra, rb = (ra if single_a else fold(ra)), (rb if single_b else fold(rb))
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
