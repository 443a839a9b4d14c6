"""Runs a capacity search (capacity.py) against a server and makes its one record.

Every probe is a full load-generator run (loadgen.run_async) of the base config at one rate
or concurrency cap. The record holds the search's settings, every probe (its value, verdict,
steady statistics and the run's summary metrics), and the verdict; its top-level metrics are
those of the highest passing probe, so it reads like any other serve record. Bad input or a
search that cannot bracket raises UserError before anything is stored.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.measure.env import capture_env
from llmdissect.results.schema import RunRecord
from llmdissect.workloads.serve.capacity import CapacitySearch, Probe, search, steady_check
from llmdissect.workloads.serve.loadgen import RunOutcome, run_async
from llmdissect.workloads.serve.serve_config import ServeConfig
from llmdissect.workloads.serve.slo import describe


def probe_config(base: ServeConfig, search_cfg: CapacitySearch, value: float) -> ServeConfig:
    """The base config at one rate (Poisson) or one concurrency cap (all sent at once)."""
    if search_cfg.over == "rate":
        return base.model_copy(update={"request_rate": value})
    return base.model_copy(update={"request_rate": math.inf, "max_concurrency": int(value)})


def capacity_record(base: ServeConfig, search_cfg: CapacitySearch, api_key: str | None = None,
                    on_probe: Callable[[Probe], None] | None = None) -> RunRecord:
    """Search, and return the finished record (status ok). Raises UserError for bad input, an
    unreachable server or an unmeetable bracket: nothing is stored then."""
    if base.trace or base.arrivals:
        raise UserError("the capacity search draws its own arrivals; it does not go with --trace or --arrivals")
    if base.turns > 1:
        raise UserError("the capacity search sends single requests; it does not go with --turns")
    if search_cfg.warmup_requests >= base.num_prompts:
        raise UserError(f"--num-prompts {base.num_prompts} must exceed --warmup-requests "
                        f"{search_cfg.warmup_requests}")
    if search_cfg.over == "concurrency" and search_cfg.search_high > base.num_prompts:
        # a cap above the number of requests limits nothing: every such probe is the same run
        search_cfg = search_cfg.model_copy(update={"search_high": float(base.num_prompts),
                                                   "search_start": min(search_cfg.search_start, base.num_prompts)})
    outcomes: dict[float, RunOutcome] = {}

    def run_probe(value: float) -> Probe:
        out = asyncio.run(run_async(probe_config(base, search_cfg, value), api_key=api_key))
        passed, steady, why = steady_check(out.results, base.slo, search_cfg.warmup_requests)
        metrics = {k: v for k, v in out.metrics.items() if k not in ("send_offsets_s", "scheduled_offsets_s")}
        p = Probe(value, passed, steady, metrics, why)
        outcomes[value] = out
        if on_probe:
            on_probe(p)
        return p

    record = RunRecord(kind=mn.SERVE, source="measured", config=base.to_config(), env=capture_env())
    record.env.pop("command", None)  # may hold --api-key
    verdict = search(search_cfg, base.slo, run_probe)
    best = outcomes[verdict["capacity"]]
    record.config.update(best.config_extra)
    record.config["capacity_search"] = search_cfg.model_dump()
    record.config.update(probe_config(base, search_cfg, verdict["capacity"]).model_dump(
        include={"request_rate", "max_concurrency"}))
    if math.isinf(record.config["request_rate"]):
        record.config["request_rate"] = "inf"
    record.env["server"] = best.server
    record.metrics = dict(best.metrics)
    key = mn.CAPACITY_REQUEST_RATE_PER_S if search_cfg.over == "rate" else mn.CAPACITY_CONCURRENCY
    record.metrics[key] = verdict["capacity"]
    record.metrics["capacity_search"] = {**verdict, "slo": dict(base.slo), "slo_text": describe(base.slo)}
    return record.finish("ok")
