"""Report section: estimates next to measurements (scatter with the ideal line, error table).

`analysis/validate.py` (the `validate` command) had not landed when this was written, so
estimates and measurements are paired here by config, in `pair_estimates` alone: same
kind, and equal values for every shared config key of docs/developing.md that both have.
"""
from __future__ import annotations

from llmdissect.analysis import findings
from llmdissect.analysis.compare import median_of
from llmdissect.report import plots
from llmdissect.report.section import Section, Table
from llmdissect.results.schema import RunRecord

KEYS = {
    "train": ("model", "hardware", "engine", "nproc", "zero", "offload", "recompute", "attn", "dtype", "optimizer",
              "micro_batch", "seq", "grad_accum", "tp", "pp", "method", "lora_rank", "quant"),
    "infer": ("model", "hardware", "batch", "input_len", "output_len", "dtype", "attn", "cache", "quant", "compile"),
}
# (label, unit, scale, estimate path, measured metric)
METRICS = {
    "train": [("tokens/s", "tokens/s", 1.0, ("tokens_per_s",), "tokens_per_s"),
              ("step time", "ms", 1e3, ("time", "step_s"), "step_time_s"),
              ("peak memory", "MiB", 2**-20, ("memory", "total_bytes"), "peak_memory_bytes")],
    "infer": [("TTFT", "ms", 1e3, ("time", "ttft_s"), "ttft_s"),
              ("TPOT", "ms", 1e3, ("time", "tpot_s"), "tpot_s"),
              ("decode tokens/s", "tokens/s", 1.0, ("decode_tokens_per_s",), "decode_tokens_per_s")],
}


def _family(kind: str) -> str:
    return "infer" if kind == "infer" else "train"


def pair_estimates(records: list[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """(estimate, latest measured record of the same configuration) pairs."""
    measured = sorted((r for r in records if r.source == "measured" and r.status == "ok"
                       and r.kind in ("pretrain", "finetune", "infer")), key=lambda r: r.started_at)
    pairs = []
    for est in records:
        kind = est.config.get("kind_estimated")
        if est.kind != "estimate" or est.status != "ok" or not kind:
            continue
        keys = KEYS[_family(kind)]
        match = None
        for m in measured:
            if m.kind != kind or m.config.get("model") != est.config.get("model"):
                continue
            if all(m.config[k] == est.config[k] for k in keys if k in m.config and k in est.config):
                match = m
        if match is not None:
            pairs.append((est, match))
    return pairs


def estimate_now(record: RunRecord) -> RunRecord | None:
    """The analytical estimate of a measured single-process CPU run made on this machine, computed
    now with this machine's calibration profile; None where that would not be the same question
    (another machine, a GPU, several processes, an option the estimator does not model)."""
    import platform

    from llmdissect.cli.estimate_cmd import INFER_ONLY, TRAIN_ONLY, _light_env, build_estimate

    c = record.config
    if (c.get("hardware") != "cpu" or (c.get("nproc") or 1) != 1 or record.env.get("hostname") != platform.node()
            or record.kind not in ("pretrain", "finetune", "infer")):
        return None
    wrong = TRAIN_ONLY if record.kind == "infer" else INFER_ONLY
    opts = {k: c[k] for k in KEYS[_family(record.kind)] if k in c and k not in wrong}
    opts = {"attn": "sdpa", "quant": "none", "tp": 1, **opts}
    if c.get("lora_targets"):
        opts["lora_targets"] = c["lora_targets"]
    for k in ("engine", "nproc", "method", "cache", "compile"):  # not options of `estimate`
        opts.pop(k, None)
    try:
        est = build_estimate(record.kind, opts).to_record(_light_env(None))
    except Exception:  # an option the estimator does not take: no estimate rather than a wrong one
        return None
    est.config["estimated_for"] = record.id
    return est


def _get(metrics: dict, path: tuple[str, ...]) -> float | None:
    value = metrics
    for p in path:
        value = value.get(p) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def estimates(records: list[RunRecord], estimate_missing: bool = True) -> Section | None:
    """Stored estimates with their measurements; with `estimate_missing`, measured CPU runs of this
    machine that have no stored estimate are estimated now (said so in the findings and table)."""
    ests = [r for r in records if r.kind == "estimate" and r.status == "ok"]
    can_estimate = estimate_missing and any(r.source == "measured" and r.kind in ("pretrain", "finetune", "infer")
                                            for r in records)
    if not ests and not can_estimate:
        return None
    sec = Section("estimates", "Estimates next to measurements",
                  "Each estimate paired with the measured run of the same configuration (same kind and shared "
                  "config keys); points on the dashed line are exact.")
    pairs = pair_estimates(records)
    now = []
    if estimate_missing:
        paired = {m.id for _, m in pairs}
        for r in records:
            if r.source == "measured" and r.status == "ok" and r.id not in paired and (e := estimate_now(r)):
                now.append((e, r))
        pairs += now
    now_ids = {e.id for e, _ in now}
    rows, points, finding_rows = [], {}, []
    for est, meas in pairs:
        fam = _family(meas.kind)
        label = f"{meas.kind} {meas.config.get('model')} ({meas.id[:6]})"
        for name, unit, scale, epath, mkey in METRICS[fam]:
            e, m = _get(est.metrics, epath), median_of(meas.metrics, mkey)
            if e is None or m is None or m <= 0 or e <= 0:
                continue
            xs, ys = points.setdefault(f"{name} ({unit})", ([], []))
            xs.append(m * scale)
            ys.append(e * scale)
            rows.append((label, name, m * scale, e * scale, f"{(e - m) / m:+.0%}",
                         "now (report time)" if est.id in now_ids else est.id, meas.id))
            finding_rows.append((label, name, m, e))
    if points:
        sec.plots.append(plots.versus("estimate-vs-measured", "Estimated against measured", points,
                                      xlabel="measured (unit of the metric)", ylabel="estimated (same unit)"))
        sec.tables.append(Table("Validation errors (estimate - measured) / measured",
                                ["configuration", "metric", "measured", "estimated", "error", "estimate id",
                                 "measured id"], rows))
        sec.findings += findings.validation(finding_rows)
    if now:
        sec.findings.append(f"{len(now)} measured run(s) had no stored estimate; they were estimated when this report "
                            f"was written, with this machine's calibration profile ('now' in the table).")
    if not points and not ests:
        return None
    unpaired = [e for e in ests if e.id not in {p[0].id for p in pairs}]
    if unpaired:
        sec.findings.append(f"{len(unpaired)} of {len(ests)} estimate(s) have no measured run of the same "
                            f"configuration in this selection (e.g. {unpaired[0].config.get('model')} on "
                            f"{unpaired[0].config.get('hardware')}); they are listed without a measurement.")
        sec.tables.append(Table("Estimates without a measurement", ["kind", "model", "hardware", "tokens/s", "MFU",
                                                                     "memory (GiB)", "fits", "estimate id"],
                                [(e.config.get("kind_estimated"), e.config.get("model"), e.config.get("hardware"),
                                  e.metrics.get("tokens_per_s"), e.metrics.get("mfu"),
                                  (_get(e.metrics, ("memory", "total_bytes")) or 0) / 2**30, e.metrics.get("fits"),
                                  e.id) for e in unpaired]))
    return sec
