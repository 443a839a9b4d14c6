"""The alpha-beta (latency-bandwidth) model of a collective, fitted to measured rows.

    time_s(size_bytes) = alpha_s + beta_s_per_byte x size_bytes

alpha is the fixed cost of one call (latency, software overhead), beta the inverse of the
bandwidth it reaches on large messages (1 / beta = the asymptotic algbw, in bytes/s; times
the operator's busbw factor it is the asymptotic busbw). `size_bytes` is nccl-tests' size,
the same as in the rows (docs/metrics.md, "Collectives").

The fit minimises the squared error of the *logarithm*, sum(log((alpha + beta s_i) / t_i))^2:
the microsecond rows (which fix alpha) weigh as much as the millisecond rows (which fix
beta), where a plain least-squares fit lets the largest sizes decide everything and often
gives a negative latency; and a row measured k times too slow pulls the line as much as one
k times too fast, so the fit is the same whether it is read as time or as bandwidth (busbw is
size over time). It starts from the weighted least squares of the relative error (weights
1/t^2, closed form), its first-order approximation, and refines it by Gauss-Newton. On the
quick suite's 2-process gloo sweeps (eleven runs on a shared 2-core VM, whose rows a slow
stretch sometimes hits 2-4x) the rows' busbw MAPE against their own fit read 20-34 % (median
27 %) this way against 22-38 % (median 30 %) with the relative-error fit alone. alpha and beta
are kept >= 0. `fit_error` is the root mean square relative error of the fitted times against
the measured ones; `fit_max_error` the largest. Pure Python, no torch: the perfmodel can
import it.
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
    """Least squares of log(alpha + beta s) against log t, with alpha, beta >= 0: the
    relative-error fit (_relative_fit), refined by Gauss-Newton (_refine_in_logs)."""
    points = [(float(s), float(t)) for s, t in zip(sizes_bytes, times_s, strict=True)]
    if len({s for s, _ in points}) < 2:
        raise ValueError("an alpha-beta fit needs at least two different sizes")
    if any(t <= 0 or not math.isfinite(t) for _, t in points):
        raise ValueError("an alpha-beta fit needs positive, finite times")
    alpha, beta = _refine_in_logs(*_relative_fit(points), points)
    errors = [(alpha + beta * s - t) / t for s, t in points]
    return AlphaBetaFit(alpha_s=alpha, beta_s_per_byte=beta,
                        fit_error=math.sqrt(sum(e * e for e in errors) / len(errors)),
                        fit_max_error=max(abs(e) for e in errors), points=len(points),
                        min_size_bytes=int(min(s for s, _ in points)), max_size_bytes=int(max(s for s, _ in points)))


def _relative_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Weighted least squares (weights 1/t^2) of t = alpha + beta s, alpha, beta >= 0. With
    u_i = 1/t_i and v_i = s_i/t_i the objective is sum (alpha u_i + beta v_i - 1)^2, whose
    normal equations are [Suu Suv; Suv Svv] [alpha; beta] = [Su; Sv]."""
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
    return alpha, beta


def _sq_rel_error(alpha: float, beta: float, points: Iterable[tuple[float, float]]) -> float:
    return sum(((alpha + beta * s - t) / t) ** 2 for s, t in points)


def _sq_log_error(alpha: float, beta: float, points: Iterable[tuple[float, float]]) -> float:
    return sum(math.log((alpha + beta * s) / t) ** 2 for s, t in points)


def _refine_in_logs(alpha: float, beta: float, points: list[tuple[float, float]],
                    iterations: int = 100) -> tuple[float, float]:
    """Projected Gauss-Newton on sum(log((alpha + beta s_i) / t_i))^2 from (alpha, beta): the
    residuals r_i = log(m_i / t_i) with m_i = alpha + beta s_i have gradients (1, s_i) / m_i;
    a parameter at 0 whose gradient would push it below stays there; each step is halved until
    the objective falls."""
    if alpha + beta <= 0:
        return alpha, beta
    best = _sq_log_error(alpha, beta, points)
    for _ in range(iterations):
        m = [alpha + beta * s for s, _ in points]
        r = [math.log(mi / t) for mi, (_, t) in zip(m, points)]
        ja = [1 / mi for mi in m]
        jb = [s / mi for mi, (s, _) in zip(m, points)]
        ga, gb = sum(a * x for a, x in zip(ja, r)), sum(b * x for b, x in zip(jb, r))
        haa, hbb, hab = sum(a * a for a in ja), sum(b * b for b in jb), sum(a * b for a, b in zip(ja, jb))
        free_a, free_b = alpha > 0 or ga < 0, beta > 0 or gb < 0
        da = db = 0.0
        det = haa * hbb - hab * hab
        if free_a and free_b and det > 0:
            da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        elif free_a and haa > 0:
            da = ga / haa
        elif free_b and hbb > 0:
            db = gb / hbb
        step, moved = 1.0, False
        while step > 1e-6:
            a, b = max(alpha - step * da, 0.0), max(beta - step * db, 0.0)
            if a + b > 0 and all(a + b * s > 0 for s, _ in points):
                value = _sq_log_error(a, b, points)
                if value < best:
                    moved = best - value > 1e-15 * (1 + best)
                    alpha, beta, best = a, b, value
                    break
            step /= 2
        if not moved:
            break
    return alpha, beta


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
