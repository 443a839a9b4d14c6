"""SLO capacity search: the highest request rate (or concurrency) whose steady probe still
meets every SLO target.

Each probe is one run of `num_prompts` requests at a rate (or a concurrency cap); the first
`warmup_requests` by send time are left out and the targets are checked on the rest (at
least MIN_STEADY_REQUESTS of them). The search brackets then bisects:

1. Bracket: probe at `search_start`; while it passes, double (up to `search_high`); while it fails, halve
   (down to `search_low`). A pass at the top or a fail at the bottom cannot bracket: a UserError.
2. Bisect: probe the midpoint of the passing and the failing value until they are within
   `search_precision` of each other (relative for rates, 1 for concurrency), or `max_probes` ran.

The verdict is the highest passing value, with the lowest failing value above it; every
probe is kept, in the order run.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmdissect.errors import UserError
from llmdissect.measure.stats import Stats
from llmdissect.workloads.serve.metrics import RequestResult, request_itls
from llmdissect.workloads.serve.slo import describe, split_key

MIN_STEADY_REQUESTS = 5


class CapacitySearch(BaseModel):
    """How `bench serve --find-max-rate / --find-max-concurrency` searches."""

    model_config = ConfigDict(extra="forbid")

    over: Literal["rate", "concurrency"]
    """What is searched: the request rate (Poisson arrivals) or the concurrency cap (rate inf)."""
    search_start: float = Field(1.0, gt=0)
    """First value probed (requests/s, or requests in flight)."""
    search_low: float = Field(0.05, gt=0)
    """Lowest value probed before the SLO is declared unmeetable."""
    search_high: float = Field(1024.0, gt=0)
    """Highest value probed before the search gives up finding a failing probe."""
    search_precision: float = Field(0.1, gt=0, lt=1)
    """Rates: stop when (failing - passing) / failing is at most this. Concurrency stops at 1."""
    warmup_requests: int = Field(5, ge=0)
    """Requests (by send time) left out of each probe's SLO check."""
    max_probes: int = Field(16, ge=2)
    """Probes at most, bracketing included."""


@dataclass
class Probe:
    value: float
    passed: bool
    steady: dict[str, float | None]
    """The SLO targets' statistics over the steady requests."""
    metrics: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "passed": self.passed, "steady": self.steady, "why": self.why,
                **{k: v for k, v in self.metrics.items() if k not in ("output_lens",)}}


def steady_check(results: list[RequestResult], slo: dict[str, float], warmup: int) -> tuple[bool, dict, str]:
    """(passed, statistic per target, why not): the targets over the requests after the warm-up."""
    ordered = sorted(results, key=lambda r: r.send_offset_s)[warmup:]
    if len(ordered) < MIN_STEADY_REQUESTS:
        raise UserError(f"a probe keeps {len(ordered)} request(s) after {warmup} warm-up; "
                        f"--num-prompts must leave at least {MIN_STEADY_REQUESTS}")
    failed = [r for r in ordered if not r.ok]
    values: dict[str, list[float]] = {
        "ttft_s": [r.ttft_s for r in ordered if r.ok and r.ttft_s is not None],
        "tpot_s": [t for r in ordered if r.ok and (t := r.tpot_s) is not None],
        "e2e_latency_s": [r.e2e_s for r in ordered if r.ok and r.e2e_s is not None],
        "itl_s": [x for r in ordered if r.ok for x in request_itls(r)]}
    steady: dict[str, float | None] = {}
    why = [f"{len(failed)} request(s) failed"] if failed else []
    for key, limit in slo.items():
        name, stat = split_key(key)
        got = values.get(name) or []
        v = (Stats.of(got).to_dict()[stat] if stat else max(got)) if got else None
        steady[key] = v
        if v is None:
            why.append(f"no {name} measured")
        elif v > limit:
            why.append(f"{name}{' ' + stat if stat else ' max'} {v:.4g} s > {limit:g} s")
    return not why, steady, "; ".join(why)


def search(cfg: CapacitySearch, slo: dict[str, float], run_probe: Callable[[float], Probe]) -> dict[str, Any]:
    """Bracket then bisect (module docstring); `run_probe(value)` runs and judges one probe."""
    if not slo:
        raise UserError("the capacity search needs --slo targets, e.g. ttft_p99=0.5,tpot_p99=0.05")
    if not cfg.search_low <= cfg.search_start <= cfg.search_high:
        raise UserError(f"--search-start {cfg.search_start:g} must lie between --search-low {cfg.search_low:g} "
                        f"and --search-high {cfg.search_high:g}")
    integer = cfg.over == "concurrency"
    probes: list[Probe] = []
    tried: dict[float, Probe] = {}

    def probe(v: float) -> Probe:
        v = float(max(1, round(v))) if integer else v
        if v not in tried:
            tried[v] = run_probe(v)
            probes.append(tried[v])
        return tried[v]

    good = bad = None
    v = cfg.search_start
    while good is None or bad is None:
        if len(probes) >= cfg.max_probes:
            break
        p = probe(v)
        if p.passed:
            good = p.value
            if bad is None:
                if v >= cfg.search_high:
                    raise UserError(f"{describe(slo)} still met at {v:g} {_unit(cfg)} (--search-high); "
                                    f"nothing to bracket")
                v = min(v * 2, cfg.search_high)
        else:
            bad = p.value
            if good is None:
                if v <= cfg.search_low or (integer and v <= 1):
                    raise UserError(f"{describe(slo)} not met even at {v:g} {_unit(cfg)} ({p.why})")
                v = max(v / 2, cfg.search_low)
    if good is None or bad is None:
        raise UserError(f"no bracket for {describe(slo)} within {cfg.max_probes} probes")
    while len(probes) < cfg.max_probes and not _close(good, bad, cfg):
        p = probe((good + bad) / 2)
        if p.passed:
            good = p.value
        else:
            bad = p.value
    return {"over": cfg.over, "capacity": good, "first_failing": bad, "converged": _close(good, bad, cfg),
            "probes": [p.to_dict() for p in probes]}


def search_over(rate: bool, concurrency: bool, sweep_rates: str | None) -> str | None:
    """"rate", "concurrency" or None (no search); the search options that clash are an error."""
    if rate and concurrency:
        raise UserError("--find-max-rate and --find-max-concurrency search one at a time")
    if (rate or concurrency) and sweep_rates:
        raise UserError("a capacity search chooses its own rates; it does not go with --sweep-rates")
    return "rate" if rate else "concurrency" if concurrency else None


def _unit(cfg: CapacitySearch) -> str:
    return "requests/s" if cfg.over == "rate" else "requests in flight"


def _close(good: float, bad: float, cfg: CapacitySearch) -> bool:
    if cfg.over == "concurrency":
        return bad - good <= 1
    return (bad - good) / bad <= cfg.search_precision
