"""`validate --published`: every shipped published point against its estimate, shown and stored."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


def run_published(category: Optional[str], db: Path, json_out: bool, detail: bool) -> None:
    from llmdissect.published.check import published_record
    from llmdissect.results.store import check_writable, open_store

    db = check_writable(db)  # the default store when none was named
    record, outcomes = published_record(category)
    summary = record.metrics["summary"]
    with open_store(db) as store:
        store.add(record)
    if json_out:
        from llmdissect.console import print_json

        print_json(record.to_dict())
        return
    show(outcomes, summary, detail)
    from llmdissect.console import console

    console.print(f"stored as {record.id[:10]} in {db}", markup=False)


def _fmt(metric: str, v: float) -> str:
    if metric == "peak_memory_bytes":
        return f"{v / 2**30:.1f} GiB"
    if metric == "mfu":
        return f"{v:.1%}"
    if metric.endswith("_per_s"):
        return f"{v:,.4g}"
    if metric.endswith("_s"):
        return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s"
    return f"{v:,.4g}"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.0%}"


def show(outcomes: list, summary: dict[str, Any], detail: bool = False) -> None:
    from llmdissect.console import console, table

    rows = [(o.point.id, o.point.metric, _fmt(o.point.metric, o.point.value), _fmt(o.point.metric, o.predicted),
             f"{o.ratio:.2f}" + ("" if o.exact else " ~"))
            for o in outcomes if o.predicted is not None]
    console.print(table("Published vs predicted (ratio = predicted / published; ~ = configuration partly "
                        "expressed)", ["point", "metric", "published", "predicted", "ratio"], rows,
                        justify_numbers=False))
    groups = [(c, s) for c, s in summary["per_category"].items() if s["points"]]
    groups += [("overall", summary["overall"]), ("approximate (~)", summary["approximate"])]
    console.print(table("Summary (exactly expressed points; approximate apart)",
                        ["group", "points", "median |error|", "within 1.25x", "within 1.5x"],
                        [(g, str(s["points"]), _pct(s["median_abs_error"]), _pct(s["within_1.25x"]),
                          _pct(s["within_1.5x"])) for g, s in groups], justify_numbers=False))
    for o in outcomes:
        if o.predicted is None:
            console.print(f"not predicted: {o.point.id}: {o.reason}", markup=False)
        elif detail and o.point.missing:
            console.print(f"approximate: {o.point.id}: missing {o.point.missing}", markup=False)
        if detail and o.predicted is not None:
            console.print(f"  {o.point.id}: {o.point.source} ({o.point.where})", markup=False)
    if summary["mfu_above_1"]:
        console.print(f"MFU above 1 predicted for: {', '.join(summary['mfu_above_1'])}", markup=False)
    for o in outcomes:
        if o.bandwidth_share is not None and o.bandwidth_share > 1:
            console.print(f"beyond the peak bandwidth: {o.point.id} needs {o.bandwidth_share:.2f}x the device's peak "
                          "memory bandwidth for its weights alone, as its options say"
                          + (" (kept approximate)" if o.point.missing else ""), markup=False)
