"""Service-level objectives: per-request limits (for goodput) and percentile targets (for the
capacity search), and the published MLPerf Inference latency limits as presets.

Written `ttft=0.5,tpot=0.05` (every request: its TTFT at most 0.5 s, its TPOT at most 0.05 s)
or `ttft_p99=0.5,tpot_p99=0.05` (the 99th percentile of the run's TTFTs at most 0.5 s, ...),
or a preset's name. Stored as {"ttft_s": 0.5} and {"ttft_s_p99": 0.5}: the metric, then the
statistic when there is one.
"""
from __future__ import annotations

import math

import llmdissect.metric_names as mn
from llmdissect.errors import UserError

SLO_KEYS = {"ttft": mn.TTFT_S, "tpot": mn.TPOT_S, "e2e": mn.E2E_LATENCY_S, "itl": mn.ITL_S}
STATS = ("mean", "median", "p90", "p95", "p99")
"""Statistics a target may name (those measure.Stats holds)."""

MLPERF_SOURCE = ("MLPerf Inference loadgen/mlperf.conf, Server scenario, 99th percentile "
                 "(https://github.com/mlcommons/inference/blob/master/loadgen/mlperf.conf)")
PRESETS: dict[str, dict[str, float]] = {
    # name: TTFT and TPOT limits in seconds at the 99th percentile (mlperf.conf gives milliseconds)
    "mlperf-llama2-70b": {"ttft_s_p99": 2.0, "tpot_s_p99": 0.2},
    "mlperf-llama2-70b-interactive": {"ttft_s_p99": 0.45, "tpot_s_p99": 0.04},
    "mlperf-mixtral-8x7b": {"ttft_s_p99": 2.0, "tpot_s_p99": 0.2},
    "mlperf-llama3.1-405b": {"ttft_s_p99": 6.0, "tpot_s_p99": 0.175},
    "mlperf-llama3.1-405b-interactive": {"ttft_s_p99": 4.5, "tpot_s_p99": 0.08},
    "mlperf-llama3.1-8b": {"ttft_s_p99": 2.0, "tpot_s_p99": 0.1},
    "mlperf-llama3.1-8b-interactive": {"ttft_s_p99": 0.5, "tpot_s_p99": 0.03},
    "mlperf-deepseek-r1": {"ttft_s_p99": 2.0, "tpot_s_p99": 0.08},
    "mlperf-deepseek-r1-interactive": {"ttft_s_p99": 1.5, "tpot_s_p99": 0.015},
}
"""Every preset's source is MLPERF_SOURCE."""


def split_key(key: str) -> tuple[str, str | None]:
    """"ttft_s_p99" -> ("ttft_s", "p99"); "ttft_s" -> ("ttft_s", None)."""
    for stat in STATS:
        if key.endswith("_" + stat):
            return key[:-len(stat) - 1], stat
    return key, None


def _example() -> str:
    return f"e.g. ttft=0.5,tpot=0.05 or ttft_p99=0.5,tpot_p99=0.05 or a preset ({', '.join(PRESETS)})"


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft=0.5,tpot_p99=0.05` -> {"ttft_s": 0.5, "tpot_s_p99": 0.05}; a preset's name -> its limits."""
    text = (text or "").strip()
    if text.lower() in PRESETS:
        return dict(PRESETS[text.lower()])
    slo: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        name, stat = split_key(key)
        name = name.removesuffix("_s")
        if name not in SLO_KEYS or not eq:
            raise UserError(f"SLO {part.strip()!r} does not parse; {_example()}")
        try:
            limit = float(value)
        except ValueError:
            raise UserError(f"SLO {key} needs a number of seconds, got {value.strip()!r}") from None
        if not limit > 0 or math.isinf(limit):
            raise UserError(f"SLO {key} must be a positive number of seconds, got {value.strip()}")
        slo[SLO_KEYS[name] + (f"_{stat}" if stat else "")] = limit
    return slo


def describe(slo: dict[str, float]) -> str:
    """{"ttft_s_p99": 0.5} -> "ttft_s p99 <= 0.5 s"."""
    parts = []
    for key, limit in slo.items():
        name, stat = split_key(key)
        parts.append(f"{name}{' ' + stat if stat else ''} <= {limit:g} s")
    return ", ".join(parts)
