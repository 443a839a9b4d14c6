"""The one Stats type: a summary of repeated samples (docs/metrics.md, "Records")."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_KEPT_SAMPLES = 1000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, 'linear')."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stats:
    """n, mean, median, min, max, stdev, p5, p90, p95, p99, and the raw samples when few."""

    n: int
    mean: float
    median: float
    min: float
    max: float
    stdev: float
    p5: float
    p90: float
    p95: float
    p99: float
    samples: list[float] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        values = [float(v) for v in samples]
        if not values:
            raise ValueError("Stats of no samples")
        s = sorted(values)
        mean = statistics.fmean(s)
        # the sample standard deviation in floats (statistics.stdev's exact fractions take
        # seconds over the million inter-token gaps of a long serving run)
        stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in s) / (len(s) - 1)) if len(s) > 1 else 0.0
        return cls(n=len(s), mean=mean, median=statistics.median(s), min=s[0], max=s[-1], stdev=stdev,
                   p5=percentile(s, 5), p90=percentile(s, 90), p95=percentile(s, 95), p99=percentile(s, 99),
                   samples=values if len(values) <= MAX_KEPT_SAMPLES else None)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Stats:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.samples is None:
            d.pop("samples")
        return d

    def scaled(self, factor: float) -> Stats:
        """The same samples times `factor` (e.g. seconds -> per-token seconds)."""
        return Stats.of([v * factor for v in self.samples]) if self.samples else Stats(
            n=self.n, mean=self.mean * factor, median=self.median * factor, min=self.min * factor,
            max=self.max * factor, stdev=self.stdev * abs(factor), p5=self.p5 * factor, p90=self.p90 * factor,
            p95=self.p95 * factor, p99=self.p99 * factor)
