"""`advise serve`: for a model on N devices and a load, the split into replicas x TP that
sustains the highest request rate within an SLO, and what a token then costs.

Each split is searched with the serving simulation (analysis.serve_estimate): a rate meets
the SLO when at least `attainment` of its requests meet every limit (DistServe's goodput
attainment, arXiv 2401.09670). The search brackets (doubling from a rate that meets it to
one that does not) and then bisects until the bracket is within 2 %. Each probe simulates
`num_prompts` Poisson arrivals per replica with seed 0, so the answer is deterministic; a
probe much shorter than the queue it builds flatters high rates, hence the default of 400.
The cost per million output tokens is the devices' price per hour over the output tokens
the found rate makes in it (rate x output_len; a steady state, not the probe's ramp and drain).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError

LOWEST_RATE = 1e-3
PRECISION = 1.02
MAX_PROBES = 40


@dataclass
class SplitResult:
    replicas: int
    tp: int
    max_rate_per_s: float
    """The highest request rate found to meet the SLO (0: not even the lowest)."""
    metrics: dict[str, Any] | None
    """The simulated run at that rate."""
    probes: int
    usd_per_m_output_tokens: float | None = None

    def to_dict(self) -> dict[str, Any]:
        m = self.metrics or {}

        def pick(key: str, q: str) -> float | None:
            return (m.get(key) or {}).get(q)

        return {"replicas": self.replicas, "tp": self.tp, "max_rate_per_s": self.max_rate_per_s,
                "ttft_p50_s": pick(mn.TTFT_S, "median"), "ttft_p99_s": pick(mn.TTFT_S, "p99"),
                "tpot_p50_s": pick(mn.TPOT_S, "median"), "tpot_p99_s": pick(mn.TPOT_S, "p99"),
                mn.OUTPUT_TOKENS_PER_S: m.get(mn.OUTPUT_TOKENS_PER_S), "probes": self.probes,
                "usd_per_m_output_tokens": self.usd_per_m_output_tokens}


def splits(devices: int, max_tp: int = 8) -> list[tuple[int, int]]:
    """(replicas, tp) with replicas x tp = devices and tp a power of two up to `max_tp`."""
    out, tp = [], 1
    while tp <= min(devices, max_tp):
        if devices % tp == 0:
            out.append((devices // tp, tp))
        tp *= 2
    return out


def _meets(metrics: dict[str, Any], attainment: float) -> bool:
    return (metrics.get("slo_attainment") or 0.0) >= attainment


def search_split(options: dict[str, Any], replicas: int, tp: int, attainment: float,
                 calibration=None) -> SplitResult:
    """The highest rate at which one split meets the SLO (options: estimate serve's)."""
    from llmdissect.analysis.serve_estimate import run_serve_estimate
    from llmdissect.perfmodel.request import estimate_request

    probes = 0

    def run(rate: float) -> dict[str, Any]:
        nonlocal probes
        probes += 1
        per_replica = options.get("num_prompts") or 100
        request = estimate_request(mn.SERVE, **{**options, "replicas": replicas, "tp": tp, "request_rate": rate,
                                                "num_prompts": per_replica * replicas})
        return run_serve_estimate(request, calibration).metrics

    lo, lo_metrics = LOWEST_RATE, run(LOWEST_RATE)
    if not _meets(lo_metrics, attainment):
        return SplitResult(replicas, tp, 0.0, lo_metrics, probes)
    hi = lo
    while probes < MAX_PROBES:
        hi *= 2 if hi > 1 else 10
        m = run(hi)
        if not _meets(m, attainment):
            break
        lo, lo_metrics = hi, m
    else:
        return SplitResult(replicas, tp, lo, lo_metrics, probes)
    while hi / lo > PRECISION and probes < MAX_PROBES:
        mid = (lo * hi) ** 0.5
        m = run(mid)
        if _meets(m, attainment):
            lo, lo_metrics = mid, m
        else:
            hi = mid
    return SplitResult(replicas, tp, lo, lo_metrics, probes)


def advise_serve(options: dict[str, Any], devices: int, attainment: float, usd_per_hour: float | None,
                 calibration=None, on_split=None) -> list[SplitResult]:
    """Every split of `devices`, best (highest sustained rate) first; a split whose model
    does not fit is left out. `usd_per_hour` prices one device; `on_split(done, total, name)`
    hears of each split as it starts."""
    if not options.get("slo"):
        raise UserError("advise serve needs --slo (e.g. ttft=0.5,tpot=0.05): the rate it finds is the highest "
                        "that meets it")
    if not 0 < attainment <= 1:
        raise UserError(f"--attainment must be in (0, 1], got {attainment}")
    results, refused = [], []
    todo = splits(devices)
    for i, (replicas, tp) in enumerate(todo):
        if on_split:
            on_split(i, len(todo), f"{replicas} x tp {tp}")
        try:
            r = search_split(options, replicas, tp, attainment, calibration)
        except UserError as e:
            refused.append(f"{replicas} x tp {tp}: {e}")
            continue
        if usd_per_hour and r.max_rate_per_s > 0:
            # the devices' price per hour over the output tokens the found rate makes in it
            tokens_per_s = r.max_rate_per_s * (options.get("output_len") or 128)
            r.usd_per_m_output_tokens = usd_per_hour * devices / 3600 / tokens_per_s * 1e6
        results.append(r)
    if not results:
        raise UserError("no split can serve this load: " + "; ".join(refused))
    return sorted(results, key=lambda r: -r.max_rate_per_s)
