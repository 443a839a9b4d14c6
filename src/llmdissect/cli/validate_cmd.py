"""`llmdissect validate`: measured records against the estimates of the same configurations."""
from __future__ import annotations

from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt

UNITS = {mn.STEP_TIME_S: "s", mn.TTFT_S: "s", mn.TPOT_S: "s", mn.TOKENS_PER_S: "tok/s", mn.DECODE_TOKENS_PER_S: "tok/s",
         mn.PEAK_MEMORY_BYTES: "B", mn.BUSBW_BYTES_PER_S: "B/s"}


def validate(
    suite: Optional[str] = typer.Option(None, "--suite", help="Only the measured records of this suite."),
    published: bool = typer.Option(False, "--published", help="Instead: every published result shipped with "
                                   "the package against its estimate (docs/published.md); stored as a record."),
    category: Optional[str] = typer.Option(None, "--category", help="With --published: only pretrain | "
                                           "finetune | infer | serve."),
    detail: bool = typer.Option(False, "--detail", help="Every pair: measured, predicted and error."),
    store_estimates: bool = typer.Option(False, "--store-estimates",
                                         help="Store the estimates computed here (tagged with --suite)."),
    db: DbPath = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Error of each estimate against its measurement, per metric (step time, tokens/s, peak
    memory, TTFT, TPOT, busbw), and the mean absolute percentage error (MAPE); with
    --published, against the published results shipped with the package."""
    from llmdissect.analysis.validate import validate_records
    from llmdissect.errors import UserError
    from llmdissect.results.store import open_existing

    if category is not None and not published:
        raise UserError("--category applies to --published only")
    if published:
        from llmdissect.cli.published_cmd import run_published

        if suite:
            raise UserError("--published checks the shipped published set, not a suite: drop --suite")
        run_published(category, db, json_out, detail)
        return
    from llmdissect.analysis.repeats import PointFolder

    folder = PointFolder()  # the repeats of a configuration on one machine are one point
    with open_existing(db) as store:
        for r in store.iter_query(suite=suite, status="ok", source="measured", light=True):
            folder.add(r)
        folder.restore(store)
        measured, n_runs = folder.records(), folder.runs
        v = validate_records(measured, store.iter_query(kind=mn.ESTIMATE, light=True)) if measured else None
    if not measured:
        where = f"suite {suite!r}" if suite else "the store"
        raise UserError(f"no measured record with status ok in {where} to validate (run a suite or a bench first)")
    if store_estimates and v.computed:
        from llmdissect.results.store import open_store

        with open_store(db) as store:
            for e in v.computed:
                e.suite = suite
                store.add(e)
    if json_out:
        from llmdissect.console import print_json

        print_json({"suite": suite, "measured_records": n_runs, "points": len(measured), **v.to_dict()})
        return
    show(v, suite, n_runs, detail, len(measured))


def show(v, suite: Optional[str], n_measured: int, detail: bool = False, n_points: int | None = None) -> None:
    from llmdissect.console import console, table

    pct = lambda x: f"{x:+.0%}"  # noqa: E731
    rows = [(s["metric"], s["pairs"], f"{s['mape']:.0%}", pct(s["median_error"]), pct(s["worst_error"]))
            for s in v.summary()]
    title = (f"Validation{' of suite ' + suite if suite else ''}: estimate vs measurement "
             f"({n_measured} measured records"
             + (f" as {n_points} points: repeats of a configuration are one, their median" if n_points
                and n_points < n_measured else "") + ")")
    console.print(table(title, ["metric", "pairs", "MAPE", "median error", "worst error"], rows))
    if v.pairs:
        console.print(f"all metrics: MAPE {v.to_dict()['mape_all']:.0%} over {len(v.pairs)} pairs; "
                      "error = (predicted - measured) / measured")
    by_record: dict[str, dict] = {}
    for p in v.pairs:
        entry = by_record.setdefault(p.record_id, {"kind": p.kind, "label": p.label, "errors": {}})
        entry["errors"].setdefault(p.metric, []).append(p.error)
        if p.kind == mn.COMM:
            entry["label"] = "gloo collectives"
    metrics = [m for m in UNITS if any(m in e["errors"] for e in by_record.values())]
    lines = [(rid[:10], e["kind"], e["label"],
              *(pct(sum(e["errors"][m]) / len(e["errors"][m])) if m in e["errors"] else "-" for m in metrics))
             for rid, e in by_record.items()]
    console.print(table("Error per record (comm: mean over its rows)", ["record", "kind", "point", *metrics], lines,
                        justify_numbers=False))
    if detail:
        console.print(table("Every pair", ["record", "metric", "point", "measured", "predicted", "error", "estimate"],
                            [(p.record_id[:10], p.metric, p.label, f"{p.measured:.4g}", f"{p.predicted:.4g}",
                              pct(p.error), p.estimate) for p in v.pairs], justify_numbers=False))
    for rid, kind, why in v.unpaired:
        console.print(f"not validated: {rid[:10]} ({kind}): {why}", markup=False)
    for rid, metric, why in v.unpredicted:
        console.print(f"not predicted: {metric} of {rid[:10]}: {why}", markup=False)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("validate")(validate)
