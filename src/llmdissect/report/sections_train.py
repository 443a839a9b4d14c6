"""Report sections of measured training: technique ablations, step-time breakdown, module shares."""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.analysis import findings
from llmdissect.analysis.compare import bootstrap_ci, median_of, samples_of
from llmdissect.report import plots
from llmdissect.report.section import Section, Table, mib, ms
from llmdissect.report.select import machine, ok
from llmdissect.results.schema import RunRecord

# Technique keys and their baseline values: the run with the fewest departures is the baseline.
TECHNIQUES = {"engine": "single", "nproc": 1, "zero": 0, "offload": "none", "recompute": "none", "method": "full",
              "quant": "none", "optimizer": "adamw", "attn": "sdpa", "compile": False, "grad_accum": 1,
              "micro_batch": None, "tp": 1, "pp": 1}
PHASES = (mn.FORWARD_S, mn.BACKWARD_S, mn.OPTIMIZER_S, mn.COMM_S)


def _departures(r: RunRecord) -> int:
    return sum(1 for k, v in TECHNIQUES.items() if v is not None and r.config.get(k, v) != v)


def technique_label(r: RunRecord, base: RunRecord | None = None) -> str:
    """The keys where `r` departs from `base` (or from the defaults), e.g. `engine=fsdp zero=3 nproc=2`."""
    diffs = []
    for k, default in TECHNIQUES.items():
        ref = base.config.get(k, default) if base is not None else default
        v = r.config.get(k, ref)
        if v != ref and v is not None:
            diffs.append(f"{k}={v}")
    return " ".join(diffs) or "baseline"


def throughput_samples(m: dict[str, Any]) -> list[float] | None:
    """tokens/s of each step (analysis.compare.samples_of)."""
    return samples_of(m, mn.TOKENS_PER_S)


def _groups(records: list[RunRecord]) -> dict[tuple, list[RunRecord]]:
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        key = (r.config.get("model"), r.config.get("seq"), r.config.get("dtype"), machine(r.env))
        groups.setdefault(key, []).append(r)
    return groups


def ablations(records: list[RunRecord]) -> Section | None:
    runs = ok(records, *mn.TRAIN_KINDS)
    groups = {k: v for k, v in _groups(runs).items() if len(v) > 1}
    if not groups:
        return None
    sec = Section("ablations", "Training technique ablations",
                  "Throughput and peak memory of each technique or combination against the run with the fewest "
                  "departures from the defaults (the baseline), same model, sequence length, dtype and machine. "
                  "Error bars: bootstrap 95 % interval of the median step's throughput.")
    rows = []
    for gi, ((model, seq, dtype, where), group) in enumerate(groups.items()):
        base = min(group, key=lambda r: (_departures(r), r.started_at))
        others = [r for r in group if r is not base]
        entries = [(f"{base.kind} baseline ({technique_label(base)})", base)] + [
            (f"{r.kind} {technique_label(r, base)}", r) for r in others]
        labels = [label for label, _ in entries]
        tput = [r.metrics.get(mn.TOKENS_PER_S) for _, r in entries]
        cis = [bootstrap_ci(s) if (s := throughput_samples(r.metrics)) and len(s) > 1 else None for _, r in entries]
        mem = [mib(r.metrics.get(mn.PEAK_MEMORY_BYTES)) for _, r in entries]
        title = f"{model}, seq {seq}, {dtype} on {where}"
        sec.plots.append(plots.bars(f"ablation-throughput-{gi}", f"Training throughput: {title}", labels,
                                    {"tokens/s (median step)": tput}, errors={"tokens/s (median step)": cis},
                                    ylabel="throughput (tokens/s)", xlabel="technique (vs baseline)",
                                    legend_title="metric"))
        sec.plots.append(plots.bars(f"ablation-memory-{gi}", f"Peak memory: {title}", labels,
                                    {"peak live tensors (MiB)": mem,
                                     "peak RSS (MiB)": [mib(r.metrics.get(mn.PEAK_RSS_BYTES)) for _, r in entries]},
                                    ylabel="peak memory (MiB)", xlabel="technique (vs baseline)",
                                    legend_title="metric"))
        measured = [findings.Measured(label, r.metrics.get(mn.TOKENS_PER_S) or 0.0, throughput_samples(r.metrics),
                                      r.metrics.get(mn.PEAK_MEMORY_BYTES)) for label, r in entries]
        sec.findings += findings.ablation(measured[0], measured[1:], f"{model} (seq {seq}), {where}")
        for (label, r), t, m in zip(entries, tput, mem):
            rows.append((model, label, r.config.get("micro_batch"), r.metrics.get("world_size"), t,
                         ms(median_of(r.metrics, mn.STEP_TIME_S)), m, r.metrics.get(mn.MFU), r.id))
    sec.tables.append(Table("Runs compared", ["model", "technique", "micro batch", "processes", "tokens/s",
                                              "step median (ms)", "peak memory (MiB)", "MFU", "run id"], rows))
    return sec


def breakdown(records: list[RunRecord]) -> Section | None:
    runs = [r for r in ok(records, *mn.TRAIN_KINDS) if median_of(r.metrics, mn.FORWARD_S) is not None]
    modules = [r for r in records if r.status == "ok" and _module_values(r.metrics)]
    if not runs and not modules:
        return None
    sec = Section("breakdown", "Step-time breakdown",
                  "Median time of each phase of a training step (forward, backward, optimizer, communication "
                  "where the engine separates it); 'other' is the median step minus the phases.")
    if runs:
        labels, parts, rows, finding_rows = [], {p[:-2]: [] for p in PHASES}, [], []
        parts["other"] = []
        for r in runs:
            label = f"{r.kind} {r.config.get('model')} {technique_label(r)} ({r.id[:6]})"
            labels.append(label)
            meds = {p[:-2]: median_of(r.metrics, p) for p in PHASES}
            step = median_of(r.metrics, mn.STEP_TIME_S) or 0.0
            other = max(0.0, step - sum(v for v in meds.values() if v))
            for p, v in meds.items():
                parts[p].append(ms(v) or 0.0)
            parts["other"].append(ms(other))
            finding_rows.append((label, {p: v for p, v in meds.items() if v is not None}))
            rows.append((label, *(ms(v) for v in meds.values()), ms(other), ms(step)))
        parts = {p: v for p, v in parts.items() if any(v)}
        sec.plots.append(plots.stacked("breakdown-phases", "Where a training step's time goes", labels, parts,
                                       xlabel="median time (ms)", ylabel="run (kind, model, technique, id)",
                                       legend_title="phase"))
        sec.findings += findings.breakdown(finding_rows)
        sec.tables.append(Table("Phase medians (ms)", ["run", "forward", "backward", "optimizer", "comm", "other",
                                                       "step"], rows))
    if modules:
        labels, shares, top_rows = [], {}, []
        for i, r in enumerate(modules):
            c = r.config
            labels.append(f"{c.get('workload', r.kind)} {c.get('model')} {technique_label(r)} ({r.id[:6]})")
            values = _module_values(r.metrics)
            total = sum(v for v in values.values() if v) or 1.0
            for name in values:
                shares.setdefault(name, [0.0] * len(modules))
            for name, v in values.items():
                shares[name][i] = 100.0 * (v or 0.0) / total
            for op in (r.metrics.get("top_ops") or [])[:5]:
                top_rows.append((labels[-1], op.get("op"), op.get("self_s") and op["self_s"] * 1e3, op.get("calls"),
                                 op.get("share") is not None and f"{op['share']:.0%}" or None))
        shares = {n: v for n, v in shares.items() if any(v)}
        sec.plots.append(plots.stacked("breakdown-modules", "Module shares of a step (torch.profiler)", labels, shares,
                                       xlabel="share of step time (%)", ylabel="run (kind, model, id)",
                                       legend_title="module"))
        ranked = sorted(shares, key=lambda n: -sum(shares[n]))
        sec.findings.append("Under the profiler, " + ", ".join(
            f"{n} takes {min(shares[n]):.0f}-{max(shares[n]):.0f} %" if len(modules) > 1
            else f"{n} {shares[n][0]:.0f} %"
            for n in ranked[:3]) + f" of the step ({len(modules)} dissected run(s)).")
        overhead = [r.metrics.get("profiling_overhead") for r in modules if r.metrics.get("profiling_overhead")]
        if overhead:
            sec.findings.append(f"Profiling overhead against untraced steps: {min(overhead):+.0%}"
                                + (f" to {max(overhead):+.0%}." if len(overhead) > 1 else "."))
        if top_rows:
            sec.tables.append(Table("Top operators by self time (dissect)", ["run", "operator", "self time (ms)",
                                                                              "calls", "share"], top_rows))
    return sec


def _module_values(m: dict[str, Any]) -> dict[str, float | None]:
    """Module name -> seconds or share, from `dissect` (`modules_s`, `modules_share`) or a `modules` dict."""
    for key in ("modules_s", "modules_share", "modules"):
        if isinstance(m.get(key), dict):
            return {name: _module_seconds(v) for name, v in m[key].items()}
    return {}


def _module_seconds(value: Any) -> float | None:
    """A module entry as seconds (or share): a number, a Stats, or a dict with time_s/seconds/share."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        for key in ("time_s", "seconds", "s", "share"):
            v = value.get(key)
            if isinstance(v, dict):
                v = v.get("median")
            if isinstance(v, (int, float)):
                return float(v)
        if "median" in value:
            return float(value["median"])
    return None
