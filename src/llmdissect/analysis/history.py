"""History of a repeated point: did its latest runs move beyond the noise of the earlier ones?

The test (docs/metrics.md, "Regression verdict"), on the point's headline metric (the
first of analysis.compare.HEADLINES for its kind: step time, TTFT, bus bandwidth), one
value per run (the run's median):

- a point needs at least 4 runs; `recent` = its newest max(2, n // 4) runs by start time,
  `before` = the others;
- the change is beyond the noise when the bootstrap 95 % intervals of the median of
  `recent` and of `before` do not overlap (the intervals `compare` uses) and the medians
  differ by at least MIN_CHANGE (a floor below which a shift is not worth a line even when
  the runs are very steady);
- `slower` when the metric moved the bad way (a longer time, a lower bandwidth), `faster`
  the other way, else `within noise`.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from llmdissect.analysis.compare import bootstrap_ci, overlap
from llmdissect.analysis.repeats import PointRecord, headline

MIN_RUNS = 4
MIN_CHANGE = 0.05


@dataclass(frozen=True)
class Verdict:
    point: PointRecord
    metric: str
    before: float
    recent: float
    before_ci: tuple[float, float]
    recent_ci: tuple[float, float]
    n_before: int
    n_recent: int
    verdict: str
    """slower | faster | within noise."""

    @property
    def change(self) -> float:
        """(recent - before) / before of the medians."""
        return (self.recent - self.before) / self.before if self.before else float("nan")


def split_recent(values: list[float]) -> tuple[list[float], list[float]]:
    """(before, recent) of values in time order: the newest max(2, n // 4) are recent."""
    k = max(2, len(values) // 4)
    return values[:-k], values[-k:]


def verdict(point: PointRecord) -> Verdict | None:
    """The point's verdict, or None with fewer than MIN_RUNS runs carrying the headline (or for
    estimates: the same configuration estimated again is not a run)."""
    h = headline(point.kind) if point.source == "measured" else None
    values = [r.value for r in point.runs if r.value is not None]  # runs are in time order
    if h is None or len(values) < MIN_RUNS:
        return None
    metric, larger_better = h
    before, recent = split_recent(values)
    mb, mr = statistics.median(before), statistics.median(recent)
    cb, cr = bootstrap_ci(before), bootstrap_ci(recent)
    change = (mr - mb) / mb if mb else 0.0
    moved = not overlap(cb, cr) and abs(change) >= MIN_CHANGE
    worse = change < 0 if larger_better else change > 0
    word = ("slower" if worse else "faster") if moved else "within noise"
    return Verdict(point, metric, mb, mr, cb, cr, len(before), len(recent), word)


def verdicts(points: list) -> list[Verdict]:
    """Verdicts of every point with enough runs, slower first, then faster, largest change first."""
    out = [v for p in points if isinstance(p, PointRecord) and (v := verdict(p)) is not None]
    order = {"slower": 0, "faster": 1, "within noise": 2}
    return sorted(out, key=lambda v: (order[v.verdict], -abs(v.change)))
