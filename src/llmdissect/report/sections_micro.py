"""Report sections of the machine: environment and ceilings, operators on a roofline, collectives."""
from __future__ import annotations

from collections import Counter
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.analysis import findings
from llmdissect.analysis.repeats import runs_of
from llmdissect.report import plots
from llmdissect.report.section import Section, Table
from llmdissect.report.select import machine, ok
from llmdissect.results.schema import RunRecord


def _is_peak(r: RunRecord) -> bool:
    return r.kind == mn.OPS and r.config.get("what") == "peak"


def measured_ceilings(records: list[RunRecord], profile: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """device -> {peak_flops_per_s: {dtype: x}, memory_bandwidth_bytes_per_s: y, source}: the latest
    `peak` record of the selection, else the calibration profile of this machine."""
    out: dict[str, dict[str, Any]] = {}
    for r in ok(records, mn.OPS):
        if _is_peak(r):
            for dev, d in (r.metrics.get("devices") or {}).items():
                out[dev] = {"peak_flops_per_s": d.get("peak_flops_per_s") or {},
                            "memory_bandwidth_bytes_per_s": d.get("memory_bandwidth_bytes_per_s"),
                            "source": f"peak run {r.id} ({r.started_at[:16]})"}
    if not out and profile:
        entries = {"cpu": profile.get("cpu") or {}, **(profile.get("gpus") or {})}
        for dev, d in entries.items():
            if d.get("peak_flops_per_s") or d.get("memory_bandwidth_bytes_per_s"):
                out[dev] = {"peak_flops_per_s": d.get("peak_flops_per_s") or {},
                            "memory_bandwidth_bytes_per_s": d.get("memory_bandwidth_bytes_per_s"),
                            "source": f"calibration profile ({profile.get('updated_at', '')[:16]})"}
    return out


def environment(records: list[RunRecord], profile: dict[str, Any]) -> Section:
    sec = Section("environment", "Environment and machine ceilings")
    measured = [r for r in records if r.source == "measured"]
    kinds: Counter = Counter()
    for r in records:
        kinds[(r.kind, r.source, r.status)] += runs_of(r)
    per_machine: Counter = Counter()
    first_env: dict[str, dict] = {}
    for r in measured or records:
        if r.env:
            per_machine[machine(r.env)] += runs_of(r)
            first_env.setdefault(machine(r.env), r.env)
    rows = []
    for where, n in per_machine.items():
        env = first_env[where]
        libs = env.get("libraries") or {}
        rows.append((where, n, env.get("memory_bytes") and f"{env['memory_bytes'] / 2**30:.1f} GiB",
                     env.get("python"), libs.get("torch"), libs.get("transformers"), env.get("git_revision")))
    sec.tables.append(Table("Machines of the records", ["machine", "records", "memory", "python", "torch",
                                                        "transformers", "git revision"], rows))
    sec.tables.append(Table("Records", ["kind", "source", "status", "count"],
                            [(*k, n) for k, n in sorted(kinds.items())]))
    ceil = measured_ceilings(records, profile)
    crow = []
    for dev, c in ceil.items():
        bw = c.get("memory_bandwidth_bytes_per_s")
        for dtype, peak in (c.get("peak_flops_per_s") or {}).items():
            crow.append((dev, dtype, peak and peak / 1e9, bw and bw / 1e9, peak / bw if peak and bw else None,
                         c["source"]))
            sec.findings.append(f"Measured {dtype} peak on {dev}: {peak / 1e9:.3g} GFLOP/s"
                                + (f"; with {bw / 1e9:.3g} GB/s of memory bandwidth the ridge point is "
                                   f"{peak / bw:.3g} FLOP/byte." if bw else "."))
    if crow:
        sec.tables.append(Table("Measured ceilings", ["device", "dtype", "peak (GFLOP/s)", "bandwidth (GB/s)",
                                                      "ridge (FLOP/byte)", "from"], crow))
    else:
        sec.findings.append("No measured ceilings: run `llmdissect peak` to add them.")
    per_kind: Counter = Counter()
    for (kind, _, _), n in kinds.items():
        per_kind[kind] += n
    sec.findings.insert(0, f"{sum(kinds.values())} record(s) from {len(rows)} machine(s): "
                        + ", ".join(f"{n} {k}" for k, n in sorted(per_kind.items()))
                        + f"; {sum(1 for r in records if r.status != 'ok')} did not end ok"
                        + (f"; repeats of a configuration on one machine are one point ({len(records)} in all)."
                           if len(records) < sum(kinds.values()) else "."))
    return sec


def failures(records: list[RunRecord]) -> Section | None:
    bad = [r for r in records if r.status not in ("ok", "skipped")]
    if not bad:
        return None
    sec = Section("failures", "Runs that did not finish")
    sec.findings.append(f"{len(bad)} run(s) ended {', '.join(sorted({r.status for r in bad}))}; their errors "
                        f"are below as recorded.")
    sec.tables.append(Table("Failed runs", ["run id", "kind", "model", "status", "error"],
                            [(r.id, r.kind, r.config.get("model"), r.status, (r.error or "")[:300]) for r in bad]))
    return sec


def operators(records: list[RunRecord], profile: dict[str, Any]) -> Section | None:
    runs = [r for r in ok(records, mn.OPS) if not _is_peak(r) and r.metrics.get("rows")]
    if not runs:
        return None
    sec = Section("operators", "Operators on the roofline",
                  "Each operator row at its measured FLOP/s against its arithmetic intensity; the lines are the "
                  "measured ceilings: min(peak FLOP/s, intensity x memory bandwidth).")
    ceil = measured_ceilings(records, profile)
    for i, r in enumerate(runs):
        rows = [row for row in r.metrics["rows"] if row.get(mn.INTENSITY) and row.get(mn.FLOPS_PER_S)]
        if not rows:
            continue
        c = r.metrics.get("ceilings") or {}
        dtype = rows[0].get("dtype", "fp32")
        peak = c.get("peak_flops_per_s")
        if isinstance(peak, dict):  # {dtype: FLOP/s}
            peak = peak.get(dtype) or max(peak.values(), default=None)
        peak = peak or max(row.get("peak_flops_per_s") or 0 for row in rows) or None
        bw = c.get("memory_bandwidth_bytes_per_s")
        dev = (ceil.get("cpu") or next(iter(ceil.values()), {}))
        peak = peak or (dev.get("peak_flops_per_s") or {}).get(dtype)
        bw = bw or dev.get("memory_bandwidth_bytes_per_s")
        series: dict[str, tuple[list, list]] = {}
        for row in rows:
            xs, ys = series.setdefault(f"{row.get('class') or row['op']} ({row.get('pass', 'fwd')})", ([], []))
            xs.append(row[mn.INTENSITY])
            ys.append(row[mn.FLOPS_PER_S])
        where = f"{r.config.get('model', '')} on {machine(r.env)}"
        if peak and bw:
            sec.plots.append(plots.roofline(f"roofline-{i}", f"Roofline: {where}", {dtype: (peak, bw)}, series))
            sec.findings += findings.roofline([(f"{row['op']} {row.get('pass', '')}".strip(), row[mn.INTENSITY],
                                                row[mn.FLOPS_PER_S], row.get(mn.PEAK_FRACTION)) for row in rows],
                                              peak, bw, dtype)
            above = [row for row in rows if row[mn.FLOPS_PER_S] > min(peak, row[mn.INTENSITY] * bw) * 1.02]
            if above:
                sec.findings.append(f"{len(above)} of {len(rows)} rows ran above these ceilings (from cache, or the "
                                    f"ceilings were measured on a busier machine); their fraction of roofline is "
                                    f"against the cache-level ceiling `bench ops` raised for them.")
        else:
            sec.plots.append(plots.lines(f"roofline-{i}", f"Operators (no ceilings measured): {where}", series,
                                         xlabel="arithmetic intensity (FLOP/byte)", ylabel="achieved (FLOP/s)",
                                         logx=True, logy=True, markers_only=True, legend_title="operator"))
        top = sorted(rows, key=lambda row: -(row.get(mn.TIME_S) or {}).get("median", 0))[:12]
        sec.tables.append(Table(f"Slowest operators: {where}", ["op", "pass", "shape", "dtype", "median (ms)",
                                                                "GFLOP/s", "GB/s", "of roofline"],
                                [(row["op"], row.get("pass"), row.get("shape"), row.get("dtype"),
                                  (row.get(mn.TIME_S) or {}).get("median", 0) * 1e3, row[mn.FLOPS_PER_S] / 1e9,
                                  (row.get(mn.BYTES_PER_S) or 0) / 1e9,
                                  f"{row[mn.PEAK_FRACTION]:.0%}" if row.get(mn.PEAK_FRACTION) else None)
                                 for row in top]))
    return sec if sec.plots else None


def collectives(records: list[RunRecord]) -> Section | None:
    runs = [r for r in ok(records, mn.COMM) if r.metrics.get("rows")]
    if not runs:
        return None
    sec = Section("collectives", "Collectives",
                  "Bus bandwidth (nccl-tests' definition) against message size, per operator; out-of-place rows "
                  "where both placements were measured.")
    for i, r in enumerate(runs):
        per_op: dict[str, list[tuple[float, float]]] = {}
        has_oop = {row.get("op") for row in r.metrics["rows"] if row.get("placement") == "out-of-place"}
        for row in r.metrics["rows"]:
            if row.get("op") in has_oop and row.get("placement") != "out-of-place":
                continue  # the fit's rows: out-of-place where both placements exist
            per_op.setdefault(row["op"], []).append((row[mn.SIZE_BYTES], row[mn.BUSBW_BYTES_PER_S]))
        where = f"{r.config.get('backend', '')} x{r.config.get('nproc', '?')} on {machine(r.env)}"
        series = {op: ([s for s, _ in v], [b / 1e9 for _, b in v]) for op, v in per_op.items()}
        sec.plots.append(plots.lines(f"comm-busbw-{i}", f"Bus bandwidth: {where}", series,
                                     xlabel="message size (bytes, log scale)", ylabel="bus bandwidth (GB/s)",
                                     logx=True, bytes_x=True, legend_title="collective"))
        sec.findings += findings.collectives(per_op, where)
        fits = r.metrics.get("fits") or {}
        if fits:
            sec.tables.append(Table(f"Alpha-beta fits: {where}", ["op", "alpha (us)", "beta (GB/s)", "fit error"],
                                    [(op, f[mn.ALPHA_S] * 1e6,
                                      1 / f[mn.BETA_S_PER_BYTE] / 1e9 if f.get(mn.BETA_S_PER_BYTE) else None,
                                      f"{f[mn.FIT_ERROR]:.0%}") for op, f in fits.items()]))
    return sec
