"""Report section of serving capacity and cost: each capacity search's probes (goodput and
the SLO targets against the offered load, with the SLO drawn as a line), the capacity found,
and the cost and energy per token of the serving runs that state them."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.report import plots
from llmdissect.report.section import Section, Table, ms
from llmdissect.report.select import machine, ok
from llmdissect.results.schema import RunRecord


def _label(r: RunRecord) -> str:
    return f"{r.config.get('model') or 'server'} on {machine(r.env)}"


def _search_plots(sec: Section, i: int, r: RunRecord) -> None:
    search = r.metrics["capacity_search"]
    probes = sorted(search["probes"], key=lambda p: p["value"])
    x = [p["value"] for p in probes]
    unit = "offered rate (requests/s)" if search["over"] == "rate" else "concurrency cap (requests in flight)"
    series = {"goodput": (x, [p.get(mn.GOODPUT_PER_S) for p in probes]),
              "throughput": (x, [p.get(mn.REQUEST_THROUGHPUT_PER_S) for p in probes])}
    sec.plots.append(plots.lines(f"capacity-goodput-{i}", f"Goodput against load: {_label(r)}", series,
                                 xlabel=unit, ylabel="rate (requests/s)", legend_title="completed"))
    targets = {}
    for key, limit in search["slo"].items():
        targets[f"{key} (steady probe)"] = (x, [ms(p["steady"].get(key)) for p in probes])
        targets[f"SLO {key} <= {limit:g} s"] = ([x[0], x[-1]], [limit * 1e3, limit * 1e3])
    sec.plots.append(plots.lines(f"capacity-slo-{i}", f"SLO targets against load: {_label(r)}", targets,
                                 xlabel=unit, ylabel="latency (ms)", legend_title="target"))


def capacity(records: list[RunRecord]) -> Section | None:
    runs = [r for r in ok(records, mn.SERVE)]
    searches = [r for r in runs if isinstance(r.metrics.get("capacity_search"), dict)]
    costed = [r for r in runs if r.metrics.get(mn.USD_PER_MILLION_OUTPUT_TOKENS) is not None
              or r.metrics.get(mn.ENERGY_J_PER_OUTPUT_TOKEN) is not None]
    if not searches and not costed:
        return None
    sec = Section("serving-capacity", "Serving capacity and cost",
                  "The highest load whose steady probe met every SLO target (bench serve --find-max-rate, "
                  "docs/serving.md), and USD and joules per token where the runs state them (docs/metrics.md).")
    rows = []
    for i, r in enumerate(searches):
        s = r.metrics["capacity_search"]
        _search_plots(sec, i, r)
        unit = "requests/s" if s["over"] == "rate" else "in flight"
        rows.append((_label(r), s.get("slo_text"), f"{s['capacity']:.4g} {unit}", f"{s['first_failing']:.4g} {unit}",
                     len(s["probes"]), s["converged"], r.id))
        sec.findings.append(f"{_label(r)}: {s['capacity']:.4g} {unit} meets {s.get('slo_text')}; "
                            f"{s['first_failing']:.4g} {unit} does not ({len(s['probes'])} probes).")
    if rows:
        sec.tables.append(Table("Capacity found", ["server", "SLO", "capacity", "first failing", "probes",
                                                   "converged", "record"], rows))
    if costed:
        sec.tables.append(Table("Cost and energy per token", [
            "server", "offered rate (req/s)", "USD/hour", "USD per M input tokens", "USD per M output tokens",
            "J per output token", "record"],
            [(_label(r), r.config.get("request_rate"), r.metrics.get("usd_per_hour"),
              r.metrics.get(mn.USD_PER_MILLION_INPUT_TOKENS), r.metrics.get(mn.USD_PER_MILLION_OUTPUT_TOKENS),
              r.metrics.get(mn.ENERGY_J_PER_OUTPUT_TOKEN), r.id) for r in costed]))
    return sec
