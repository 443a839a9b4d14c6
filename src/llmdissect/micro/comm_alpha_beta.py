"""The alpha-beta (latency-bandwidth) model of a collective, fitted to measured rows.

    time_s(size_bytes) = alpha_s + beta_s_per_byte x size_bytes

alpha is the fixed cost of one call (latency, software overhead), beta the inverse of the
bandwidth it reaches on large messages (1 / beta = the asymptotic algbw, in bytes/s; times
the operator's busbw factor it is the asymptotic busbw). `size_bytes` is nccl-tests' size,
the same as in the rows (docs/metrics.md, "Collectives").

The fit minimises the squared *relative* error sum(((alpha + beta s_i) - t_i) / t_i)^2, so
that the microsecond rows (which fix alpha) weigh as much as the millisecond rows (which
fix beta); a plain least-squares fit lets the largest sizes decide everything and often
gives a negative latency. alpha and beta are kept >= 0. `fit_error` is the root mean square
relative error of the fitted times against the measured ones; `fit_max_error` the largest.
Pure Python, no torch: the perfmodel can import it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import llmdissect.metric_names as mn


@dataclass(frozen=True)
class AlphaBetaFit:
    alpha_s: float
    beta_s_per_byte: float
    fit_error: float
    """Root mean square of (fitted - measured) / measured over the points."""
    fit_max_error: float
    points: int
    min_size_bytes: int
    max_size_bytes: int

    def time_s(self, size_bytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * size_bytes

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        """1 / beta: the algorithm bandwidth approached by large messages."""
        return 1.0 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float]) -> AlphaBetaFit:
    """Weighted least squares (weights 1/t^2) of t = alpha + beta s, with alpha, beta >= 0.

    With u_i = 1/t_i and v_i = s_i/t_i the objective is sum (alpha u_i + beta v_i - 1)^2,
    whose normal equations are [Suu Suv; Suv Svv] [alpha; beta] = [Su; Sv]."""
    points = [(float(s), float(t)) for s, t in zip(sizes_bytes, times_s, strict=True)]
    if len({s for s, _ in points}) < 2:
        raise ValueError("an alpha-beta fit needs at least two different sizes")
    if any(t <= 0 or not math.isfinite(t) for _, t in points):
        raise ValueError("an alpha-beta fit needs positive, finite times")
    u = [1 / t for _, t in points]
    v = [s / t for s, t in points]
    suu, svv = sum(x * x for x in u), sum(x * x for x in v)
    suv, su, sv = sum(a * b for a, b in zip(u, v)), sum(u), sum(v)
    det = suu * svv - suv * suv
    alpha = (su * svv - sv * suv) / det if det > 0 else -1.0
    beta = (suu * sv - suv * su) / det if det > 0 else -1.0
    if alpha < 0 or beta < 0:  # the constrained optimum lies on an edge: keep the better one
        edges = [(0.0, max(sv / svv, 0.0)), (max(su / suu, 0.0), 0.0)]
        alpha, beta = min(edges, key=lambda ab: _sq_rel_error(ab[0], ab[1], points))
    errors = [(alpha + beta * s - t) / t for s, t in points]
    return AlphaBetaFit(alpha_s=alpha, beta_s_per_byte=beta,
                        fit_error=math.sqrt(sum(e * e for e in errors) / len(errors)),
                        fit_max_error=max(abs(e) for e in errors), points=len(points),
                        min_size_bytes=int(min(s for s, _ in points)), max_size_bytes=int(max(s for s, _ in points)))


def _sq_rel_error(alpha: float, beta: float, points: Iterable[tuple[float, float]]) -> float:
    return sum(((alpha + beta * s - t) / t) ** 2 for s, t in points)


def fit_rows(rows: Sequence[dict[str, Any]]) -> dict[str, AlphaBetaFit]:
    """One fit per operator from comm rows (median time of each row). Where an operator has
    both placements, the out-of-place rows are used, as nccl-tests lists them first.
    Operators with fewer than two sizes (or a non-positive time) get no fit."""
    fits: dict[str, AlphaBetaFit] = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        placements = {r["placement"] for r in mine}
        if len(placements) > 1:
            mine = [r for r in mine if r["placement"] == "out-of-place"]
        try:
            fits[op] = fit_alpha_beta([r[mn.SIZE_BYTES] for r in mine], [r[mn.TIME_S]["median"] for r in mine])
        except ValueError:  # one size only, or a zero time (a timer too coarse): no fit
            continue
    return fits
