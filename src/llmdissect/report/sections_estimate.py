"""Report section: estimates next to measurements (scatter with the ideal line, error table).

The pairing and the errors are `analysis.validate.validate_records` (what `llmdissect
validate` prints): each ok measured record with the stored estimate of the same
configuration, else an estimate computed now on this machine's calibration profile. The
report keeps computed estimates only for runs measured on this machine (another machine's
run against this machine's ceilings would be a different question), and none with
`estimate_missing=False`.
"""
from __future__ import annotations

import platform

import llmdissect.metric_names as mn
from llmdissect.analysis import findings
from llmdissect.report import plots
from llmdissect.report.section import Section, Table
from llmdissect.results.schema import RunRecord

# metric -> (label with unit, scale from the metric's unit)
SHOWN = {mn.STEP_TIME_S: ("step time (ms)", 1e3), mn.TOKENS_PER_S: ("tokens/s", 1.0),
         mn.PEAK_MEMORY_BYTES: ("peak memory (MiB)", 2**-20), mn.TTFT_S: ("TTFT (ms)", 1e3),
         mn.TPOT_S: ("TPOT (ms)", 1e3), mn.DECODE_TOKENS_PER_S: ("decode tokens/s", 1.0),
         mn.BUSBW_BYTES_PER_S: ("bus bandwidth (GB/s)", 1e-9)}


def _get(metrics: dict, path: tuple[str, ...]) -> float | None:
    value = metrics
    for p in path:
        value = value.get(p) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _summary(pairs: list) -> list[tuple]:
    """Per metric of the shown pairs: count, MAPE, median and worst error (as `validate`)."""
    from llmdissect.analysis.validate import Validation

    return [(s["metric"], s["pairs"], f"{s['mape']:.0%}", f"{s['median_error']:+.0%}", f"{s['worst_error']:+.0%}")
            for s in Validation(pairs=list(pairs)).summary()]


def estimates(records: list[RunRecord], estimate_missing: bool = True) -> Section | None:
    from llmdissect.analysis.validate import validate_records

    ests = [r for r in records if r.kind == mn.ESTIMATE and r.status == "ok"]
    measured = [r for r in records if r.source == "measured" and r.status == "ok"
                and r.kind in (mn.PRETRAIN, mn.FINETUNE, mn.INFER, mn.COMM)]
    if not ests and not measured:
        return None
    here = {r.id for r in measured if r.env.get("hostname") == platform.node()}
    v = validate_records(measured, ests)
    pairs = [p for p in v.pairs if p.estimate not in ("computed",) or (estimate_missing and p.record_id in here)]
    pairs = [p for p in pairs if p.kind != mn.COMM or (estimate_missing and p.record_id in here)]
    if not pairs and not ests:
        return None
    sec = Section("estimates", "Estimates next to measurements",
                  "Each measured run with the estimate of the same configuration (llmdissect validate): a stored "
                  "estimate where one exists, else one computed now with this machine's calibration profile "
                  "('computed'); points on the dashed line are exact.")
    points: dict[str, tuple[list, list]] = {}
    rows, finding_rows = [], []
    for p in pairs:
        name, scale = SHOWN.get(p.metric, (p.metric, 1.0))
        if p.measured <= 0 or p.predicted <= 0:
            continue
        xs, ys = points.setdefault(name, ([], []))
        xs.append(p.measured * scale)
        ys.append(p.predicted * scale)
        rows.append((p.label, p.metric, p.measured * scale, p.predicted * scale, f"{p.error:+.0%}", p.estimate,
                     p.record_id))
        finding_rows.append((f"{p.kind} {p.label}", p.metric, p.measured, p.predicted))
    summary = _summary(pairs)
    if summary:
        sec.tables.append(Table("Error per metric: MAPE = mean |estimate - measured| / measured",
                                ["metric", "pairs", "MAPE", "median error", "worst error"], summary))
    missing = v.not_predicted()
    if missing:
        sec.findings += [f"Not predicted: {row['metric']} of {len(row['records'])} run(s): {row['reason']}."
                         for row in missing]
    if points:
        sec.plots.append(plots.versus("estimate-vs-measured", "Estimated against measured", points,
                                      xlabel="measured (unit in the legend)", ylabel="estimated (same unit)"))
        sec.tables.append(Table("Validation errors: (estimate - measured) / measured",
                                ["configuration", "metric", "measured", "estimated", "error", "estimate",
                                 "measured id"], rows))
        sec.findings += findings.validation(finding_rows)
        computed = {p.record_id for p in pairs if p.estimate == "computed"}
        if computed:
            sec.findings.append(f"{len(computed)} measured run(s) had no stored estimate; theirs were computed when "
                                f"this report was written, with this machine's calibration profile.")
    paired_ids = {p.estimate for p in pairs}
    unpaired = [e for e in ests if e.id not in paired_ids]
    if unpaired:
        sec.findings.append(f"{len(unpaired)} of {len(ests)} stored estimate(s) have no measured run of the same "
                            f"configuration in this selection (e.g. {unpaired[0].config.get('model')} on "
                            f"{unpaired[0].config.get('hardware')}); they are listed without a measurement.")
        sec.tables.append(Table("Estimates without a measurement", ["kind", "model", "hardware", "tokens/s", "MFU",
                                                                     "memory (GiB)", "fits", "estimate id"],
                                [(e.config.get("kind_estimated"), e.config.get("model"), e.config.get("hardware"),
                                  e.metrics.get(mn.TOKENS_PER_S), e.metrics.get(mn.MFU),
                                  (_get(e.metrics, (mn.MEMORY, mn.TOTAL_BYTES)) or 0) / 2**30, e.metrics.get(mn.FITS),
                                  e.id) for e in unpaired]))
    return sec


def published(records: list[RunRecord]) -> Section | None:
    """The newest `validate --published` record: published against predicted on log axes,
    the summary per category, the points it cannot express and why."""
    runs = [r for r in records if r.kind == mn.VALIDATION and r.status == "ok"]
    if not runs:
        return None
    rec = max(runs, key=lambda r: r.finished_at or "")
    points, summary = rec.metrics.get("points") or [], rec.metrics.get("summary") or {}
    sec = Section("published", "Estimates against published results",
                  "Each point of the published set shipped with the package (llmdissect validate --published): the "
                  "value its source published against the estimate of the configuration the source states, from "
                  "the hardware catalogue alone; ratio = predicted / published. '~' marks a configuration the "
                  "model expresses only in part.")
    series: dict[str, tuple[list, list]] = {}
    rows = []
    for p in points:
        if p.get("predicted") is None:
            continue
        xs, ys = series.setdefault(f"{p['category']}: {p['metric']}", ([], []))
        xs.append(p["published"])
        ys.append(p["predicted"])
        rows.append((p["id"], p["metric"], p["published"], p["predicted"],
                     f"{p['ratio']:.2f}" + (" ~" if p.get("missing") else ""), p["source"]))
    groups = [(c, s) for c, s in (summary.get("per_category") or {}).items() if s.get("points")]
    groups += [(g, summary[g]) for g in ("overall", "approximate") if summary.get(g)]
    pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    sec.tables.append(Table("Median |error| and the share within 1.25x and 1.5x (exactly expressed points)",
                            ["group", "points", "median |error|", "within 1.25x", "within 1.5x"],
                            [(g, s["points"], pct(s["median_abs_error"]), pct(s["within_1.25x"]),
                              pct(s["within_1.5x"])) for g, s in groups]))
    if series:
        sec.plots.append(plots.versus("published-vs-predicted", "Predicted against published", series,
                                      xlabel="published (the metric's unit)", ylabel="predicted (same unit)"))
        sec.tables.append(Table("Every predicted point", ["point", "metric", "published", "predicted", "ratio",
                                                          "source"], rows))
    skipped = [p for p in points if p.get("predicted") is None]
    if skipped:
        sec.findings.append(f"{len(skipped)} point(s) not predicted: "
                            + "; ".join(f"{p['id']} ({p['reason']})" for p in skipped[:8])
                            + (" ..." if len(skipped) > 8 else ""))
    if summary.get("mfu_above_1"):
        sec.findings.append(f"MFU above 1 predicted for {', '.join(summary['mfu_above_1'])}: a model error.")
    if summary.get("beyond_peak_bandwidth"):
        sec.findings.append(f"Published numbers beyond the device's peak memory bandwidth as their options say "
                            f"(something they do not express made them faster): "
                            f"{', '.join(summary['beyond_peak_bandwidth'])}.")
    return sec
