"""Report sections of repeated points: regression verdicts and trends (first in the report),
and, on request (`report --runs`), a row per run."""
from __future__ import annotations

import statistics

from llmdissect.analysis.compare import describe
from llmdissect.analysis.history import MIN_CHANGE, MIN_RUNS, verdicts
from llmdissect.analysis.repeats import PointRecord, headline
from llmdissect.report import plots
from llmdissect.report.section import Section, Table, pct
from llmdissect.report.select import machine
from llmdissect.results.schema import RunRecord

MAX_PANELS = 24
MAX_MARKERS = 60
"""A trend panel draws at most this many markers: longer histories are binned in time order
(the median of each bin), so a plot's size does not grow with the number of runs."""


def _repeated(records: list[RunRecord]) -> list[PointRecord]:
    return [r for r in records if isinstance(r, PointRecord) and r.count > 1]


def _label(p: PointRecord) -> str:
    return f"{p.kind} {describe(p)}"


def _binned(values: list[float]) -> tuple[list[float], list[float]]:
    """(run index, value) with at most MAX_MARKERS points: medians of consecutive bins."""
    n = len(values)
    if n <= MAX_MARKERS:
        return list(range(1, n + 1)), values
    size = -(-n // MAX_MARKERS)
    xs, ys = [], []
    for start in range(0, n, size):
        chunk = values[start:start + size]
        xs.append(start + (len(chunk) + 1) / 2)
        ys.append(statistics.median(chunk))
    return xs, ys


def _revision_changes(p: PointRecord) -> list[float]:
    """Between which runs (of those with a value) the git revision changed, as x positions of the
    trend panel (runs numbered from 1); at most 20, the latest."""
    runs = [r for r in p.runs if r.value is not None]
    return [i + 0.5 for i in range(1, len(runs)) if runs[i].revision != runs[i - 1].revision][-20:]


def _revisions(v) -> str:
    """Which git revisions the newest runs and the earlier ones ran at: where to look for the cause."""
    runs = [r for r in v.point.runs if r.value is not None]
    def names(rs) -> str:
        return ", ".join(sorted({str(r.revision or "unknown")[:10] for r in rs}))
    return f"git revision {names(runs[-v.n_recent:])} against {names(runs[:-v.n_recent])}"


def history(records: list[RunRecord]) -> Section | None:
    points = _repeated(records)
    if not points:
        return None
    sec = Section("history", "Repeated points: regressions and trends",
                  f"Records of the same configuration on the same machine are one point (count, median across runs, "
                  f"bootstrap 95 % interval of that median). Verdict (points with {MIN_RUNS}+ runs): the newest "
                  f"max(2, n/4) runs against the earlier ones, on the headline metric; 'slower' or 'faster' when the "
                  f"two intervals of the median do not overlap and the medians differ by {MIN_CHANGE:.0%} or more.")
    judged = verdicts(points)
    moved = [v for v in judged if v.verdict != "within noise"]
    sec.findings.append(f"{len(points)} point(s) ran more than once ({sum(p.count for p in points)} runs); "
                        f"{len(judged)} have {MIN_RUNS}+ runs and a verdict: "
                        f"{sum(v.verdict == 'slower' for v in judged)} slower, "
                        f"{sum(v.verdict == 'faster' for v in judged)} faster, "
                        f"{sum(v.verdict == 'within noise' for v in judged)} within noise.")
    for v in moved:
        sec.findings.append(f"{v.verdict.capitalize()}: {_label(v.point)} on {machine(v.point.env)}: {v.metric} "
                            f"{v.before:.4g} -> {v.recent:.4g} ({pct(v.change)}; {v.n_recent} newest run(s) "
                            f"against {v.n_before} earlier; intervals {v.before_ci[0]:.4g}-{v.before_ci[1]:.4g} "
                            f"and {v.recent_ci[0]:.4g}-{v.recent_ci[1]:.4g}; {_revisions(v)}).")
    by_point = {id(v.point): v for v in judged}
    rows = []
    for p in points:
        ci, values, v = p.interval(), p.values(), by_point.get(id(p))
        h = headline(p.kind)
        rows.append((_label(p), machine(p.env), p.count, h[0] if h else None,
                     statistics.median(values) if values else None, ci and ci[0], ci and ci[1],
                     p.runs[0].started_at[:16], p.runs[-1].started_at[:16],
                     len({r.revision for r in p.runs}), v.verdict if v else "-"))
    sec.tables.append(Table("Repeated points", ["point", "machine", "runs", "metric", "median", "95 % low",
                                                "95 % high", "first run", "last run", "git revisions", "verdict"],
                            rows))
    shown = sorted(points, key=lambda p: (by_point.get(id(p)) is None or by_point[id(p)].verdict == "within noise",
                                          p.source != "measured", -p.count))[:MAX_PANELS]
    shown = [p for p in shown if len(p.values()) > 1]
    panels = {f"{_label(p)} ({headline(p.kind)[0]})": _binned(p.values()) for p in shown}
    marks = {f"{_label(p)} ({headline(p.kind)[0]})": _revision_changes(p) for p in shown}
    if panels:
        sec.plots.append(plots.small_multiples(
            "history-trend", "Headline metric of each repeated point, run after run", panels, marks=marks,
            xlabel="run, oldest first (binned medians past 60 runs); dashed: a new git revision",
            ylabel="headline metric (step time s, TTFT s, busbw B/s)"))
    return sec


def every_run(records: list[RunRecord]) -> Section | None:
    """One row per run of every point (report --runs)."""
    points = [r for r in records if isinstance(r, PointRecord)]
    if not points:
        return None
    sec = Section("runs", "Every run", "One row per stored run of each point (report --runs); the other sections "
                  "show each point once.")
    rows = [(_label(p), run.id, run.started_at[:19], run.revision, run.value) for p in points for run in p.runs]
    sec.tables.append(Table("Runs", ["point", "run id", "started (UTC)", "git revision", "headline value"], rows))
    return sec
