"""Report sections of inference (offline grid) and serving (latency against throughput)."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.analysis import findings
from llmdissect.analysis.compare import median_of, samples_of
from llmdissect.report import plots
from llmdissect.report.section import Section, Table, ms
from llmdissect.report.select import machine, ok
from llmdissect.results.schema import RunRecord


def _measured(r: RunRecord, key: str, scale: float = 1.0) -> findings.Measured:
    s = samples_of(r.metrics, key)
    return findings.Measured(r.id, (median_of(r.metrics, key) or 0.0) * scale, [v * scale for v in s] if s else None)


def inference(records: list[RunRecord]) -> Section | None:
    runs = [r for r in ok(records, mn.INFER) if median_of(r.metrics, mn.TTFT_S) is not None]
    if not runs:
        return None
    sec = Section("inference", "Offline inference",
                  "TTFT, TPOT and decode throughput (docs/metrics.md) against batch size and prompt length; one "
                  "line per model, quantization and output length, medians over the timed calls.")
    groups: dict[tuple, list[RunRecord]] = {}
    for r in runs:
        c = r.config
        groups.setdefault((c.get("model"), c.get("quant", "none"), c.get("dtype"), machine(r.env)), []).append(r)
    ttft_len, tpot_batch, dec_batch = {}, {}, {}
    for (model, quant, dtype, where), group in groups.items():
        tag = f"{model} {dtype}" + (f" {quant}" if quant not in (None, "none") else "")
        for batch in sorted({r.config.get("batch") for r in group}):
            pts = [r for r in group if r.config.get("batch") == batch]
            ttft_len[f"{tag} b={batch}"] = ([r.config.get("input_len") for r in pts],
                                            [ms(median_of(r.metrics, mn.TTFT_S)) for r in pts])
        for length in sorted({r.config.get("input_len") for r in group}):
            pts = [r for r in group if r.config.get("input_len") == length]
            tpot_batch[f"{tag} in={length}"] = ([r.config.get("batch") for r in pts],
                                                [ms(median_of(r.metrics, mn.TPOT_S)) for r in pts])
            dec_batch[f"{tag} in={length}"] = ([r.config.get("batch") for r in pts],
                                               [median_of(r.metrics, mn.DECODE_TOKENS_PER_S) for r in pts])
            if len(pts) > 1:
                sec.findings += findings.scaling(
                    f"Decode throughput of {tag} at prompt {length}",
                    [(r.config["batch"], _measured(r, mn.DECODE_TOKENS_PER_S)) for r in pts], "batch", "tokens/s",
                    where)
                sec.findings += findings.scaling(
                    f"TPOT of {tag} at prompt {length}",
                    [(r.config["batch"], _measured(r, mn.TPOT_S, 1e3)) for r in pts], "batch", "ms", where)
        for batch in sorted({r.config.get("batch") for r in group}):
            pts = [r for r in group if r.config.get("batch") == batch]
            if len({r.config.get("input_len") for r in pts}) > 1:
                sec.findings += findings.scaling(
                    f"TTFT of {tag} at batch {batch}",
                    [(r.config["input_len"], _measured(r, mn.TTFT_S, 1e3)) for r in pts], "prompt length", "ms", where)
    sec.plots.append(plots.lines("infer-ttft", "Time to first token against prompt length", ttft_len,
                                 xlabel="prompt length (tokens)", ylabel="TTFT, median (ms)", logx=True,
                                 legend_title="model, batch"))
    sec.plots.append(plots.lines("infer-tpot", "Time per output token against batch size", tpot_batch,
                                 xlabel="batch size (sequences)", ylabel="TPOT, median (ms)", logx=True,
                                 legend_title="model, prompt"))
    sec.plots.append(plots.lines("infer-throughput", "Decode throughput against batch size", dec_batch,
                                 xlabel="batch size (sequences)", ylabel="decode throughput (tokens/s)", logx=True,
                                 legend_title="model, prompt"))
    rows = [(r.config.get("model"), r.config.get("quant"), r.config.get("batch"), r.config.get("input_len"),
             r.config.get("output_len"), ms(median_of(r.metrics, mn.TTFT_S)), ms(median_of(r.metrics, mn.TPOT_S)),
             median_of(r.metrics, mn.DECODE_TOKENS_PER_S), median_of(r.metrics, mn.PREFILL_TOKENS_PER_S),
             r.metrics.get("weights_bytes") and r.metrics["weights_bytes"] / 2**20) for r in runs]
    sec.tables.append(Table("Inference points", ["model", "quant", "batch", "prompt", "output", "TTFT (ms)",
                                                 "TPOT (ms)", "decode tokens/s", "prefill tokens/s",
                                                 "weights (MiB)"], rows))
    return sec


def _rate(r: RunRecord) -> float:
    rate = r.config.get("request_rate")
    return float("inf") if rate in (None, "inf") else float(rate)


def _simulations(group: list[RunRecord]) -> list[tuple[RunRecord, dict]]:
    """(run, metrics of the simulation of its load) for each run that names its server."""
    from llmdissect.analysis.serve_estimate import estimate_measured_serve
    from llmdissect.errors import UserError

    out = []
    for r in group:
        if not r.config.get("served"):
            continue
        try:
            out.append((r, estimate_measured_serve(r.config, r.metrics).metrics))
        except (UserError, KeyError, TypeError, ValueError):
            continue
    return out


def _simulated(group: list[RunRecord], sims: list | None = None) -> dict[str, tuple[list[float], list[float]]]:
    """TTFT p50 and TPOT p50 of the simulated runs of the group's loads, against their throughput."""
    points = [(m[mn.REQUEST_THROUGHPUT_PER_S], m[mn.TTFT_S]["median"], m[mn.TPOT_S]["median"])
              for _, m in (_simulations(group) if sims is None else sims)]
    if not points:
        return {}
    x = [p[0] for p in points]
    return {"TTFT p50 simulated": (x, [p[1] * 1e3 for p in points]),
            "TPOT p50 simulated": (x, [p[2] * 1e3 for p in points])}


SIMULATION_HOLDS = 0.2
"""Issue 18's bound: a simulated TTFT or TPOT p50 further than this from the measured one is
where the report says the prediction stops holding."""


def departures(sims: list[tuple[RunRecord, dict]], name: str) -> list[str]:
    """Where the simulation stops holding: the offered rates at which its TTFT or TPOT p50 is
    more than SIMULATION_HOLDS from the measured one (the CPU server's batching at saturation,
    say, which the scheduler profile does not follow)."""
    off = []
    for r, m in sims:
        errs = []
        for metric, label in ((mn.TTFT_S, "TTFT"), (mn.TPOT_S, "TPOT")):
            measured, simulated = (r.metrics.get(metric) or {}).get("median"), (m.get(metric) or {}).get("median")
            if measured and simulated is not None and abs(simulated / measured - 1) > SIMULATION_HOLDS:
                errs.append(f"{label} p50 {simulated / measured - 1:+.0%}")
        if errs:
            rate = "unbounded" if _rate(r) == float("inf") else f"{_rate(r):g} req/s"
            off.append(f"{rate} ({', '.join(errs)})")
    if not off:
        return []
    return [f"The simulation of {name} stops holding (more than {SIMULATION_HOLDS:.0%} from the measurement) "
            f"at: {'; '.join(off)}."]


def _goodput_plot(sec: Section, gi: int, name: str, group: list[RunRecord]) -> None:
    """Goodput next to throughput against the offered rate (finite rates), where the runs had SLOs:
    where the two part is where the SLO stops being met."""
    runs = [r for r in group if r.metrics.get(mn.GOODPUT_PER_S) is not None and _rate(r) != float("inf")]
    if len(runs) < 2:
        return
    from llmdissect.workloads.serve.slo import describe

    x = [_rate(r) for r in runs]
    series = {"goodput (met the SLO)": (x, [r.metrics[mn.GOODPUT_PER_S] for r in runs]),
              "throughput (completed)": (x, [r.metrics[mn.REQUEST_THROUGHPUT_PER_S] for r in runs]),
              "offered": (x, x)}
    slo = describe(runs[-1].metrics.get("slo") or {})
    title = f"Goodput against offered rate: {name}" + (f" (SLO {slo})" if slo else "")
    sec.plots.append(plots.lines(f"serve-goodput-{gi}", title, series,
                                 xlabel="offered rate (requests/s)", ylabel="rate (requests/s)",
                                 legend_title="requests"))


def _engine_comparison(runs: list[RunRecord]) -> list[str]:
    """The paper's engine comparison: engines that served the same model on the same machine
    at the same offered rates, side by side (the newest run of each rate)."""
    by_model: dict[str, dict[str, dict[float, tuple[float, float]]]] = {}
    for r in sorted(runs, key=lambda r: r.started_at or ""):
        engine = (r.env.get("server") or {}).get("engine") or r.config.get("engine")
        if not engine:
            continue
        key = f"{r.config.get('model')} on {machine(r.env)}"
        by_model.setdefault(key, {}).setdefault(engine, {})[_rate(r)] = (
            r.metrics.get(mn.OUTPUT_TOKENS_PER_S) or 0.0, (r.metrics.get(mn.TTFT_S) or {}).get("median") or 0.0)
    return [f for key, rows in by_model.items() if len(rows) > 1 for f in findings.engines(rows, key)]


def _server_plot(sec: Section, gi: int, name: str, group: list[RunRecord]) -> None:
    """What the server reported during the busiest run of the group that scraped its /metrics
    (workloads/serve/server_metrics.py): requests running and waiting over the run."""
    scraped = [r for r in group if (r.metrics.get(mn.SERVER_METRICS) or {}).get("t_s")]
    if not scraped:
        return
    r = max(scraped, key=lambda r: r.metrics[mn.REQUEST_THROUGHPUT_PER_S])
    sm = r.metrics[mn.SERVER_METRICS]
    series = {label: (sm["t_s"], sm["series"][key]) for key, label in (("running", "running"),
                                                                         ("waiting", "waiting"))
              if key in sm["series"]}
    rate = "unbounded" if _rate(r) == float("inf") else f"{_rate(r):g} req/s"
    sec.plots.append(plots.lines(f"serve-server-{gi}", f"Server during the {rate} run: {name} (KV cache up to "
                                 f"{100 * (sm.get('kv_cache_use_max') or 0):.1f} %)", series,
                                 xlabel="time since the first request (s)", ylabel="requests (server's /metrics)",
                                 legend_title="requests"))


def serving(records: list[RunRecord]) -> Section | None:
    runs = [r for r in ok(records, mn.SERVE) if r.metrics.get(mn.REQUEST_THROUGHPUT_PER_S)
            and "capacity_search" not in r.metrics]  # a search's record has its own section (sections_serving)
    if not runs:
        return None
    sec = Section("serving", "Serving",
                  "Latency percentiles against achieved throughput, one point per offered request rate "
                  "(docs/metrics.md: TTFT from sending the request, TPOT per request). Where a run names its "
                  "server (config.served), the simulation of the same load on that engine (estimate serve) is "
                  "drawn beside it as 'simulated'.")
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        engine = (r.env.get("server") or {}).get("engine") or r.config.get("engine")
        groups.setdefault(f"{r.config.get('model') or r.config.get('server') or 'server'}"
                          + (f" ({engine})" if engine else "") + f" on {machine(r.env)}", []).append(r)
    rows = []
    for gi, (name, group) in enumerate(groups.items()):
        group = sorted(group, key=_rate)
        x = [r.metrics[mn.REQUEST_THROUGHPUT_PER_S] for r in group]
        series = {}
        for metric, label in ((mn.TTFT_S, "TTFT"), (mn.E2E_LATENCY_S, "end-to-end")):
            for q in ("median", "p99"):
                ys = [(r.metrics.get(metric) or {}).get(q) for r in group]
                if any(y is not None for y in ys):
                    series[f"{label} {'p50' if q == 'median' else q}"] = (x, [y * 1e3 if y is not None else None
                                                                              for y in ys])
        tpot = [(r.metrics.get(mn.TPOT_S) or {}).get("median") for r in group]
        if any(y is not None for y in tpot):
            series["TPOT p50"] = (x, [y * 1e3 if y is not None else None for y in tpot])
        sims = _simulations(group)
        series.update(_simulated(group, sims))
        sec.plots.append(plots.lines(f"serve-latency-{gi}", f"Latency against throughput: {name}", series,
                                     xlabel="achieved throughput (requests/s)", ylabel="latency (ms)",
                                     legend_title="percentile"))
        _goodput_plot(sec, gi, name, group)
        _server_plot(sec, gi, name, group)
        sec.findings += findings.serving([(_rate(r), r.metrics[mn.REQUEST_THROUGHPUT_PER_S],
                                           (r.metrics.get(mn.TTFT_S) or {}).get("median") or 0.0,
                                           (r.metrics.get(mn.TTFT_S) or {}).get("p99") or 0.0) for r in group], name)
        sec.findings += departures(sims, name)
        for r in group:
            m = r.metrics
            rows.append((name, "unbounded" if _rate(r) == float("inf") else _rate(r), m.get("completed"),
                         m[mn.REQUEST_THROUGHPUT_PER_S], m.get(mn.OUTPUT_TOKENS_PER_S),
                         ms((m.get(mn.TTFT_S) or {}).get("median")), ms((m.get(mn.TTFT_S) or {}).get("p99")),
                         ms((m.get(mn.TPOT_S) or {}).get("median")), ms((m.get(mn.TPOT_S) or {}).get("p99")),
                         m.get(mn.GOODPUT_PER_S)))
    sec.findings += _engine_comparison(runs)
    sec.tables.append(Table("Serving runs", ["server", "offered rate (req/s)", "completed", "requests/s",
                                             "output tokens/s", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)",
                                             "TPOT p99 (ms)", "goodput (req/s)"], rows))
    return sec
