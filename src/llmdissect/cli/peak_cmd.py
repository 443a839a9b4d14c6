"""`llmdissect peak`: this machine's measured ceilings (matmul FLOP/s per dtype, copy
bandwidth), stored in its calibration profile and shown next to catalogued or theoretical peaks."""
from __future__ import annotations

from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt


def show(record) -> None:
    from llmdissect.console import console, human_rate, human_seconds, table

    for entry in record.metrics["devices"].values():
        theory = entry.get("theoretical_peak_flops_per_s") or {}
        cat = entry.get("catalogued") or {}
        ref_name = "theoretical" if entry["device"] == "cpu" else f"catalogued ({cat.get('name', 'unknown device')})"
        ref_flops = theory if entry["device"] == "cpu" else cat.get("peak_flops_per_s", {})
        rows = []
        for r in entry["rows"]:
            if r["what"] == "matmul":
                ref = ref_flops.get(r["dtype"])
                rows.append((f"matmul {r['dtype']} {r['n']}^3", human_seconds(r[mn.TIME_S]["median"]),
                             human_rate(r[mn.FLOPS_PER_S], "FLOP/s"), human_rate(ref, "FLOP/s"),
                             f"{r[mn.FLOPS_PER_S] / ref:.1%}" if ref else "-"))
            else:
                ref = cat.get("memory_bandwidth_bytes_per_s")
                rows.append((f"copy {r[mn.SIZE_BYTES] / 2**20:.0f} MiB (read + write)",
                             human_seconds(r[mn.TIME_S]["median"]), human_rate(r[mn.BYTES_PER_S], "B/s"),
                             human_rate(ref, "B/s"), f"{r[mn.BYTES_PER_S] / ref:.1%}" if ref else "-"))
        console.print(table(f"{entry['name']} ({entry['device']}): measured ceilings (median of each size)",
                            ["what", "time", "measured", ref_name, "of it"], rows))
        best = ", ".join(f"{k} {human_rate(v, 'FLOP/s')}" for k, v in entry["peak_flops_per_s"].items())
        console.print(f"peak ({record.metrics.get('threads')} threads): {best}; "
                      f"bandwidth {human_rate(entry['memory_bandwidth_bytes_per_s'], 'B/s')}")
        if entry.get("peak_raised"):
            up = entry["peak_raised"]
            console.print(f"{up['dtype']} peak raised from the matmul rows' {human_rate(up['matmul_rows'], 'FLOP/s')} "
                          f"to the GEMM grid's fastest product, {human_rate(up['gemm_grid'], 'FLOP/s')} "
                          "(the rows ran in a slow stretch of this machine)")
        fixed = fixed_costs_line(entry.get("overheads") or {})
        if fixed:
            console.print(fixed)
        if entry["device"] == "cpu" and entry.get("theoretical"):
            console.print("theoretical peak assumes: " + "; ".join(entry["theoretical"]["assumptions"]))
            if entry.get("cpu_capability"):
                console.print(f"torch CPU kernels: {entry['cpu_capability']}")
    if record.metrics.get("profile_note"):
        console.print(record.metrics["profile_note"])
    if record.metrics.get("profile_path"):
        console.print(f"stored in {record.metrics['profile_path']}; record {record.id}")


def fixed_costs_line(o: dict) -> str:
    """The fixed costs the probe measured (micro.overhead), in one line; "" where none."""
    from llmdissect.console import human_seconds

    if not o.get("op_fixed_s"):
        return ""
    cold = o.get("op_fixed_cold_s")
    parts = [f"{human_seconds(o['op_fixed_s'])} an operator"
             + (f" ({human_seconds(cold)} with the caches emptied first)" if cold else "")]
    for key, what in (("cache_update_s", "a KV-cache update"), ("forward_fixed_s", "a forward outside its layers"),
                      ("generate_step_s", "a generate step outside the model"), ("generate_call_s", "a generate call")):
        if o.get(key) is not None:
            parts.append(f"{human_seconds(o[key])} {what}")
    return "fixed costs: " + ", ".join(parts)


def peak(quick: bool = typer.Option(False, "--quick", help="Fewer, smaller sizes (about 10 s on a CPU)."),
         device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda:N (default: cpu and every GPU)."),
         min_time: Optional[float] = typer.Option(None, "--min-time", help="Seconds each size is timed for."),
         profile: bool = typer.Option(True, help="Store the peaks in this machine's calibration profile."),
         timeout: float = typer.Option(600.0, "--timeout", help="Seconds before the run is stopped."),
         threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (default: usable cores)."),
         db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Measure dense matmul FLOP/s per dtype and memory bandwidth on the CPU and each GPU."""
    from llmdissect.cli.recording import finish
    from llmdissect.errors import UserError
    from llmdissect.micro.peak_launch import run_peak, visible_devices
    from llmdissect.results.store import check_writable

    devices = visible_devices()
    if device is not None:
        if device not in devices:
            raise UserError(f"--device {device!r} is not visible here; devices: {', '.join(devices)}")
        devices = [device]
    if threads is not None and threads < 1:
        raise UserError(f"--threads must be at least 1, got {threads}")
    if min_time is not None and not 0 <= min_time <= 60:
        raise UserError(f"--min-time must be between 0 and 60 seconds, got {min_time:g}")
    db_path = check_writable(db)
    record, child = run_peak(quick, devices, min_time, progress=True, timeout_s=timeout, store_profile=profile,
                              threads=threads)
    finish(record, db_path, json_out, show, user_error=child.user_error)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("peak")(peak)
