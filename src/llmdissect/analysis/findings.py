"""Findings: a few sentences per report section, computed from the data, with numbers.

Each function takes plain numbers (what the section plotted) and returns sentences. Where
two measurements' bootstrap 95 % intervals of the median overlap, the sentence says the
difference is too noisy to tell instead of claiming it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmdissect.analysis.compare import bootstrap_ci, overlap


@dataclass(frozen=True)
class Measured:
    """One configuration's value: the median, and the samples it came from when kept."""

    label: str
    value: float
    samples: Sequence[float] | None = None
    memory_bytes: float | None = None


def rel(base: float, new: float) -> float:
    return (new - base) / base if base else float("nan")


def _pct(x: float) -> str:
    return f"{abs(x) * 100:.0f} %" if abs(x) >= 0.01 else f"{abs(x) * 100:.1f} %"


def _moved(x: float, what: str) -> str:
    """'raised throughput by 21 %' / 'cut peak memory by 38 %' / 'left peak memory unchanged'."""
    if abs(x) < 0.005:
        return f"left {what} unchanged (within 0.5 %)"
    return f"{'raised' if x >= 0 else 'cut'} {what} by {_pct(x)}"


def too_noisy(a: Sequence[float] | None, b: Sequence[float] | None) -> tuple[float, float, float, float] | None:
    """The two intervals when they overlap (too noisy to tell), else None."""
    if not a or not b or len(a) < 2 or len(b) < 2:
        return None
    ca, cb = bootstrap_ci(a), bootstrap_ci(b)
    return (*ca, *cb) if overlap(ca, cb) else None


def ablation(base: Measured, variants: Sequence[Measured], where: str, unit: str = "tokens/s") -> list[str]:
    """Throughput and peak memory of each technique against the baseline."""
    out = []
    for v in variants:
        t = rel(base.value, v.value)
        s = f"{v.label} {_moved(t, 'throughput')} ({base.value:.4g} -> {v.value:.4g} {unit})"
        if base.memory_bytes and v.memory_bytes:
            m = rel(base.memory_bytes, v.memory_bytes)
            s += (f" and {_moved(m, 'peak memory')} "
                  f"({base.memory_bytes / 2**20:.0f} -> {v.memory_bytes / 2**20:.0f} MiB)")
        s += f" against {base.label}, on {where}."
        noise = too_noisy(base.samples, v.samples)
        if noise:
            s += (f" The throughput difference is too noisy to tell: the 95 % intervals overlap "
                  f"({noise[0]:.4g}-{noise[1]:.4g} vs {noise[2]:.4g}-{noise[3]:.4g} {unit}).")
        out.append(s)
    return out


def breakdown(rows: Sequence[tuple[str, dict[str, float]]]) -> list[str]:
    """Which phase dominates the step, and the range of each phase's share across runs."""
    if not rows:
        return []
    shares: dict[str, list[tuple[float, str]]] = {}
    for label, parts in rows:
        total = sum(v for v in parts.values() if v)
        for phase, v in parts.items():
            if total and v is not None:
                shares.setdefault(phase, []).append((v / total, label))
    largest = max(shares, key=lambda p: sum(s for s, _ in shares[p]) / len(shares[p]))
    lo, hi = min(shares[largest]), max(shares[largest])
    out = [f"{largest.capitalize()} is the largest part of the step: {lo[0]:.0%} ({lo[1]}) to "
           f"{hi[0]:.0%} ({hi[1]}) of the summed phases over {len(rows)} run(s)."]
    rest = [f"{p} {min(v)[0]:.0%}-{max(v)[0]:.0%}" for p, v in shares.items() if p != largest]
    if rest:
        out.append("The other parts take " + ", ".join(rest) + ".")
    return out


def roofline(points: Sequence[tuple], peak: float, bandwidth: float, dtype: str) -> list[str]:
    """points: (operator, intensity FLOP/byte, achieved FLOP/s[, fraction of its own roofline])."""
    if not points:
        return []
    ridge = peak / bandwidth
    memory_bound = [p for p in points if p[1] < ridge]
    fractions = sorted(((p[3] if len(p) > 3 and p[3] is not None else p[2] / min(peak, p[1] * bandwidth), p[0])
                        for p in points if p[1] > 0), reverse=True)
    out = [f"The ridge point of this machine is {ridge:.3g} FLOP/byte ({peak / 1e9:.3g} GFLOP/s {dtype} over "
           f"{bandwidth / 1e9:.3g} GB/s); {len(memory_bound)} of {len(points)} operator rows lie left of it "
           f"(memory-bound)."]
    if fractions:
        best, worst = fractions[0], fractions[-1]
        out.append(f"Closest to its roofline: {best[1]} at {best[0]:.0%}; farthest: {worst[1]} at "
                   f"{worst[0] * 100:.2g} %.")
    return out


def collectives(per_op: dict[str, list[tuple[float, float]]], where: str) -> list[str]:
    """per_op: operator -> [(size bytes, busbw bytes/s)]."""
    out = []
    for op, rows in per_op.items():
        if not rows:
            continue
        rows = sorted(rows)
        best = max(rows, key=lambda r: r[1])
        small, large = rows[0], rows[-1]
        verb = "rises" if large[1] > small[1] * 1.05 else "falls" if large[1] < small[1] / 1.05 else "moves little"
        out.append(f"{op} on {where}: bus bandwidth {verb}, from {small[1] / 1e9:.3g} GB/s at "
                   f"{small[0] / 1024:.3g} KiB to {large[1] / 1e9:.3g} GB/s at {large[0] / 2**20:.3g} MiB "
                   f"(best {best[1] / 1e9:.3g} GB/s at {best[0] / 2**20:.3g} MiB).")
    if len(per_op) > 1:
        top = {op: max(b for _, b in rows) for op, rows in per_op.items() if rows}
        fast = max(top, key=top.get)
        slow = min(top, key=top.get)
        if fast != slow:
            out.append(f"At their best, {fast} reaches {top[fast] / top[slow]:.2g}x the bus bandwidth of {slow}.")
    return out


def scaling(name: str, points: Sequence[tuple[float, Measured]], xname: str, unit: str, where: str) -> list[str]:
    """How a metric moves from the smallest to the largest x (batch, length)."""
    if len(points) < 2:
        return []
    pts = sorted(points, key=lambda p: p[0])
    (x0, a), (x1, b) = pts[0], pts[-1]
    ratio = b.value / a.value if a.value else float("nan")
    s = (f"{name} goes from {a.value:.4g} to {b.value:.4g} {unit} ({ratio:.2f}x) as {xname} grows from "
         f"{x0:g} to {x1:g} ({where}).")
    noise = too_noisy(a.samples, b.samples)
    if noise:
        s += " Too noisy to tell apart: the 95 % intervals overlap."
    return [s]


def serving(rows: Sequence[tuple[float, float, float, float]], where: str) -> list[str]:
    """rows: (offered rate per s, achieved requests/s, TTFT p50 s, TTFT p99 s), by offered rate."""
    if not rows:
        return []
    rows = sorted(rows, key=lambda r: r[0])
    peak = max(rows, key=lambda r: r[1])
    out = [f"The server completed at most {peak[1]:.3g} requests/s ({where}), at an offered rate of "
           f"{'unbounded' if peak[0] == float('inf') else f'{peak[0]:g}/s'}."]
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        out.append(f"Median TTFT rises from {a[2] * 1e3:.0f} ms to {b[2] * 1e3:.0f} ms and p99 TTFT from "
                   f"{a[3] * 1e3:.0f} ms to {b[3] * 1e3:.0f} ms as the offered rate goes from "
                   f"{a[0]:g}/s to {'unbounded' if b[0] == float('inf') else f'{b[0]:g}/s'}.")
    return out


def engines(rows: dict[str, dict[float, tuple[float, float]]], model: str) -> list[str]:
    """rows: engine -> offered rate -> (output tokens/s, TTFT p50 s). One sentence comparing
    each pair of engines at the rates both ran, and where the first is ahead by 10 % or more."""
    names = sorted(rows)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rates = sorted(set(rows[a]) & set(rows[b]))
            if not rates:
                continue
            parts = []
            for r in rates:
                (ta, fa), (tb, fb) = rows[a][r], rows[b][r]
                if ta and tb and fa and fb:
                    parts.append(f"{'unbounded' if r == float('inf') else f'{r:g}/s'}: {ta / tb:.2f}x the output "
                                 f"tokens/s, {fa / fb:.2f}x the median TTFT")
            ahead = [r for r in rates if rows[b][r][0] and rows[a][r][0] / rows[b][r][0] >= 1.1]
            verdict = (f"{a} is ahead from {'unbounded' if ahead[0] == float('inf') else f'{ahead[0]:g}/s'}"
                       if ahead else "neither is 10 % ahead in throughput at these rates")
            if parts:
                out.append(f"{a} against {b} on {model}: " + "; ".join(parts) + f" ({verdict}).")
    return out


def validation(rows: Sequence[tuple[str, str, float, float]]) -> list[str]:
    """rows: (configuration, metric, measured, estimated)."""
    if not rows:
        return []
    errs: dict[str, list[tuple[float, str]]] = {}
    for label, metric, meas, est in rows:
        if meas:
            errs.setdefault(metric, []).append(((est - meas) / meas, label))
    out = []
    for metric, values in errs.items():
        if len(values) == 1:
            out.append(f"{metric}: the estimate is off by {values[0][0]:+.0%} ({values[0][1]}).")
            continue
        worst = max(values, key=lambda v: abs(v[0]))
        mean_abs = sum(abs(v) for v, _ in values) / len(values)
        out.append(f"{metric}: the estimate is off by {mean_abs:.0%} on average over {len(values)} pair(s); the "
                   f"largest error is {worst[0]:+.0%} ({worst[1]}).")
    return out


def comparison(rows: Sequence[tuple], name_a: str, name_b: str) -> list[str]:
    """rows as analysis.compare.compare_rows."""
    if not rows:
        return [f"No configuration appears in both {name_a} and {name_b}."]
    beyond = [r for r in rows if r[6] == "beyond noise"]
    out = [f"{len({r[0] for r in rows})} configuration(s) appear on both sides; {len(beyond)} of {len(rows)} "
           f"metric differences are beyond the noise (Mann-Whitney p < 0.05 and separate 95 % intervals)."]
    for r in sorted(beyond, key=lambda r: -abs((r[4] or 1) - 1))[:3]:
        out.append(f"{r[1]} of {r[0]}: {r[2]:.4g} -> {r[3]:.4g} ({r[4]:.2f}x, p = {r[5]:.3g}).")
    noisy = [r for r in rows if r[6] == "within noise"]
    if noisy:
        out.append(f"{len(noisy)} difference(s) are too noisy to tell (for example {noisy[0][1]} of {noisy[0][0]}: "
                   f"{noisy[0][4]:.2f}x, p = {noisy[0][5]:.2g}).")
    return out
