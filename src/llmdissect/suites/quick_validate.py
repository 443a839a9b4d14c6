"""Quick-suite step, the last: estimate every configuration the quick suite measured (on this
machine's calibration), store those estimates beside the measurements, and report the
error of each prediction per metric (what `llmdissect validate --suite quick` prints); then
the shipped published results against their estimates (`validate --published`, milliseconds),
stored for the report."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

RUN_LAST = True
"""quick_steps() puts this step after every other, wherever it is listed."""


def _validate(ctx: QuickContext) -> None:
    from llmdissect.analysis.validate import validate_records
    from llmdissect.errors import UserError

    measured = [r for r in ctx.records if r.source == "measured" and r.status == "ok"]
    if not measured:  # `run quick --only validate`: what the quick suite measured before
        measured = [r for r in ctx.store.query(suite="quick") if r.source == "measured" and r.status == "ok"]
    if not measured:
        raise UserError("no measured record of this quick-suite run to validate")
    v = validate_records(measured, ctx.store.query(kind=mn.ESTIMATE))
    for est in v.computed:
        ctx.save(est)
    for s in v.summary():
        ctx.log(f"validate {s['metric']}: {s['pairs']} pair(s), MAPE {s['mape']:.0%}, "
                f"median error {s['median_error']:+.0%}, worst {s['worst_error']:+.0%}")
    for row in v.not_predicted():
        ctx.log(f"not predicted: {row['metric']} of {len(row['records'])} record(s): {row['reason']}")
    ctx.log(f"validate: {len(v.pairs)} pairs from {len(measured)} measured records, {len(v.computed)} estimates "
            f"stored; table: `llmdissect validate --suite quick --db {ctx.db_path}`")
    _published(ctx)


def _published(ctx: QuickContext) -> None:
    from llmdissect.published.check import published_record

    record, _ = published_record()
    ctx.save(record)
    o = record.metrics["summary"]["overall"]
    if o["points"]:
        ctx.log(f"published: {o['points']} point(s), median |error| {o['median_abs_error']:.0%}, "
                f"{o['within_1.25x']:.0%} within 1.25x; table: `llmdissect validate --published`")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("validate", "estimate what the suite measured and report the error per metric", _validate)]
