"""How a suite's plan and outcome look on the terminal (tables on stdout)."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.console import console, human_bytes, human_rate, table
from llmdissect.results.schema import RunRecord
from llmdissect.suites.runner import Plan, action


def predicted(p) -> str:
    pr = p.prediction
    if pr.busbw_bytes_per_s:
        return f"busbw {human_rate(pr.busbw_bytes_per_s, 'B/s')} at the largest size"
    if pr.fits is None and pr.tokens_per_s is None and pr.memory_bytes is None:
        return "-"
    parts = []
    if pr.fits is not None:
        parts.append("fits" if pr.fits else "does not fit")
    if pr.memory_bytes is not None:
        parts.append(human_bytes(pr.memory_bytes))
    if pr.tokens_per_s:
        parts.append(human_rate(pr.tokens_per_s, "tok/s"))
    return ", ".join(parts)


def show_plan(plan: Plan, force: bool = False) -> None:
    rows = []
    for i, p in enumerate(plan.items):
        what = action(p, plan, force)
        if what == "skip":
            what = f"skip: {p.skip}"
        elif what == "run" and p.skip:
            what = f"run (--force; {p.skip})"
        where = "estimate" if p.point.kind == mn.ESTIMATE else "measure"
        rows.append((i + 1, p.key[:10], p.point.kind, where, p.point.label()[:70], predicted(p), what[:110]))
    s = plan.suite
    console.print(table(f"Suite {s.name} ({s.source}): {len(plan.items)} points"
                        + (f", {s.duplicates} duplicate(s) dropped" if s.duplicates else ""),
                        ["#", "key", "kind", "source", "point", "predicted (this machine / the platform)", "action"],
                        rows, justify_numbers=False))
    n_run = sum(1 for p in plan.items if action(p, plan, force) == "run")
    console.print(f"{n_run} to run, {sum(1 for p in plan.items if action(p, plan, force) == 'skip')} to skip, "
                  f"{len(plan.recorded)} already recorded")


def show_outcome(plan: Plan, new: list[RunRecord], db_path, records_dir=None) -> None:
    by_status: dict[str, int] = {}
    for r in new:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    bad = [(r.config.get("suite_point", "")[:10], r.kind, r.status, (r.error or "")[:120])
           for r in new if r.status != "ok"]
    if bad:
        console.print(table("Points not ok", ["key", "kind", "status", "reason"], bad, justify_numbers=False))
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "nothing to run"
    earlier = f" ({len(plan.recorded)} recorded earlier)" if plan.recorded else ""
    if records_dir is not None:
        console.print(f"suite {plan.suite.name}: {summary}{earlier}; records in {records_dir} "
                      f"(`llmdissect results import {records_dir}` merges them into a store)")
        return
    console.print(f"suite {plan.suite.name}: {summary}{earlier}; results in {db_path} "
                  f"(`llmdissect results list --suite {plan.suite.name} --db {db_path}`)")
