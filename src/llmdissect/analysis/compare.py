"""Compare two sets of records: the same configurations side by side, with ratios and whether
each difference is beyond the noise of the samples.

A difference is "beyond noise" when the two-sided Mann-Whitney U test on the raw samples
(Stats `samples`) gives p < 0.05 and the bootstrap 95 % confidence intervals of the two
medians do not overlap. With few samples (3 against 3 the smallest possible p is 0.1) the
answer is honestly "too noisy to tell"; rerun with more steps or repeats.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.results.schema import RunRecord

ALPHA = 0.05
CONFIDENCE = 0.95
# Headline metric of each kind: (metric, True when larger is better).
HEADLINES: dict[str, list[tuple[str, bool]]] = {
    mn.PRETRAIN: [(mn.STEP_TIME_S, False), (mn.TOKENS_PER_S, True), (mn.PEAK_MEMORY_BYTES, False)],
    mn.FINETUNE: [(mn.STEP_TIME_S, False), (mn.TOKENS_PER_S, True), (mn.PEAK_MEMORY_BYTES, False)],
    mn.INFER: [(mn.TTFT_S, False), (mn.TPOT_S, False), (mn.DECODE_TOKENS_PER_S, True)],
    mn.SERVE: [(mn.TTFT_S, False), (mn.TPOT_S, False), (mn.REQUEST_THROUGHPUT_PER_S, True)],
    mn.COMM: [(mn.AVG_BUSBW_BYTES_PER_S, True)],
    mn.ESTIMATE: [(mn.TOKENS_PER_S, True)],
}
# Config keys that describe where or when a run happened, not what it was.
NOT_CONFIG = {"hardware", "device", "data", "tokenizer", "ds_config", "base_url", "server", "seed", "steps",
              "warmup", "repeats", "timeout_s"}


def median_of(metrics: dict[str, Any], key: str) -> float | None:
    """The median of a Stats metric, or a scalar metric as it is."""
    value = metrics.get(key)
    if isinstance(value, dict):
        value = value.get("median")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def samples_of(metrics: dict[str, Any], key: str) -> list[float] | None:
    """Raw samples of a Stats metric; training tokens_per_s per step from the step times
    (tokens per step / step time, as docs/metrics.md defines the median's rate)."""
    value = metrics.get(key)
    if isinstance(value, dict) and value.get("samples"):
        return [float(v) for v in value["samples"]]
    if key == mn.TOKENS_PER_S and metrics.get("tokens_per_step"):
        steps = samples_of(metrics, mn.STEP_TIME_S)
        return [metrics["tokens_per_step"] / s for s in steps if s > 0] if steps else None
    return None


def bootstrap_ci(samples: Sequence[float], confidence: float = CONFIDENCE, n_boot: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the median (fixed seed: reports are reproducible)."""
    import numpy as np

    data = np.asarray(samples, dtype=float)
    if data.size < 2:
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(data, size=(n_boot, data.size), replace=True), axis=1)
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(medians, tail)), float(np.percentile(medians, 100 - tail))


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


@dataclass(frozen=True)
class Difference:
    metric: str
    a: float
    b: float
    ratio: float | None
    """b / a."""
    p_value: float | None
    beyond_noise: bool | None
    """None when there are no samples to judge by (a scalar metric)."""

    @property
    def verdict(self) -> str:
        if self.beyond_noise is None:
            return "no samples"
        return "beyond noise" if self.beyond_noise else "within noise"


def difference(metric: str, ma: dict[str, Any], mb: dict[str, Any]) -> Difference | None:
    a, b = median_of(ma, metric), median_of(mb, metric)
    if a is None or b is None:
        return None
    ratio = b / a if a else None
    sa, sb = samples_of(ma, metric), samples_of(mb, metric)
    if not sa or not sb or len(sa) < 2 or len(sb) < 2:
        return Difference(metric, a, b, ratio, None, None)
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(sa, sb, alternative="two-sided").pvalue)
    separate = not overlap(bootstrap_ci(sa), bootstrap_ci(sb))
    return Difference(metric, a, b, ratio, p, p < ALPHA and separate)


def config_key(record: RunRecord) -> tuple:
    """What a run was, without where it ran: equal keys compare."""
    items = {k: v for k, v in record.config.items() if k not in NOT_CONFIG and not isinstance(v, (dict, list))}
    return (record.kind, tuple(sorted((k, repr(v)) for k, v in items.items())))


def describe(record: RunRecord) -> str:
    """A short label of a configuration for tables and plots."""
    c = record.config
    if record.kind in mn.TRAIN_KINDS:
        parts = [c.get("model"), c.get("engine"), f"zero{c['zero']}" if c.get("zero") else None,
                 f"x{c['nproc']}" if (c.get("nproc") or 1) > 1 else None,
                 c.get("method") if c.get("method") not in (None, "full") else None,
                 f"recompute={c['recompute']}" if c.get("recompute") not in (None, "none") else None,
                 f"mb={c.get('micro_batch')}"]
    elif record.kind == mn.INFER:
        parts = [c.get("model"), f"b={c.get('batch')}", f"in={c.get('input_len')}", f"out={c.get('output_len')}",
                 c.get("quant") if c.get("quant") not in (None, "none") else None]
    elif record.kind == mn.SERVE:
        parts = [c.get("model") or c.get("server"), f"rate={c.get('request_rate')}"]
    elif record.kind == mn.COMM:
        parts = [c.get("backend"), f"x{c.get('nproc')}", c.get("ops") if isinstance(c.get("ops"), str) else None]
    else:
        parts = [c.get("model"), c.get("what"), c.get("hardware")]
    return " ".join(str(p) for p in parts if p not in (None, ""))


@dataclass(frozen=True)
class Pair:
    label: str
    kind: str
    a: RunRecord
    b: RunRecord
    differences: list[Difference]


def pair_records(a: Iterable[RunRecord], b: Iterable[RunRecord]) -> list[Pair]:
    """Configurations present (ok) on both sides; the latest record of each side when repeated."""
    def latest(records: Iterable[RunRecord]) -> dict[tuple, RunRecord]:
        out: dict[tuple, RunRecord] = {}
        for r in sorted(records, key=lambda r: r.started_at):
            if r.status == "ok" and r.kind in HEADLINES:
                out[config_key(r)] = r
        return out

    left, right = latest(a), latest(b)
    pairs = []
    for key in [k for k in left if k in right]:
        ra, rb = left[key], right[key]
        diffs = [d for m, _ in HEADLINES[ra.kind] if (d := difference(m, ra.metrics, rb.metrics))]
        if diffs:
            pairs.append(Pair(describe(ra), ra.kind, ra, rb, diffs))
    return pairs


def compare_rows(pairs: list[Pair]) -> list[tuple]:
    """(configuration, metric, A, B, B/A, p, verdict) for tables."""
    rows = []
    for p in pairs:
        for d in p.differences:
            rows.append((p.label, d.metric, d.a, d.b, d.ratio, d.p_value, d.verdict))
    return rows
