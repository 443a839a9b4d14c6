"""`llmdissect calibrate`: `peak`, then the operators of a small model (per-class
efficiencies) and, unless told not to, a 2-process gloo collective fit, all into this
machine's calibration profile, which `estimate` then reads."""
from __future__ import annotations

import typer

from llmdissect.cli.options import DbOpt, DbPath, JsonOpt


def calibrate(model: str = typer.Option("tiny-llama", "--model", help="Model whose operators set the efficiencies."),
              tokens: int = typer.Option(512, "--tokens", help="Tokens through the layer."),
              comm: bool = typer.Option(True, help="Also fit all-reduce/all-gather over 2 gloo processes."),
              db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Measure this machine's ceilings and efficiencies for `estimate` (about 1-2 minutes on a CPU)."""
    import time

    from llmdissect.calibration_profile import load_profile
    from llmdissect.console import console, note, print_json
    from llmdissect.micro.ops_config import parse_ops_config
    from llmdissect.micro.ops_launch import run_ops
    from llmdissect.micro.peak_launch import run_peak
    from llmdissect.results.recording import save
    from llmdissect.results.store import check_writable

    cfg = parse_ops_config(model=model, tokens=tokens, quant=False, min_time_s=0.1)
    db_path = check_writable(db)
    t0 = time.perf_counter()
    records = []
    record, _ = run_peak(quick=False, progress=not json_out, min_time_s=0.5)
    records.append(save(record, db_path))
    if record.status == "ok":
        record, _ = run_ops(cfg, progress=not json_out)
        records.append(save(record, db_path))
    if record.status == "ok" and comm:
        from llmdissect.micro.comm_config import CommRequest
        from llmdissect.micro.comm_launch import build_config, run_comm, store_fits

        req = CommRequest(ops="all_reduce,all_gather", min_bytes="1K", max_bytes="16M", factor=4, iters=10,
                          warmup=2, backend="gloo", nproc=2, timeout_s=240)
        crec, _ = run_comm(build_config(req), req, progress=not json_out)
        records.append(save(crec, db_path))
        if crec.status == "ok":
            store_fits(crec)
    wall = time.perf_counter() - t0
    failed = [r for r in records if r.status != "ok"]
    profile = load_profile()
    if json_out:
        print_json({"records": [r.id for r in records], "statuses": [r.status for r in records], "wall_s": wall,
                    "profile": profile})
    else:
        cpu = profile.get("cpu", {})
        peaks = ", ".join(f"{k} {v / 1e9:.3g} GFLOP/s" for k, v in (cpu.get("peak_flops_per_s") or {}).items())
        console.print(f"peaks: {peaks}; bandwidth {(cpu.get('memory_bandwidth_bytes_per_s') or 0) / 1e9:.3g} GB/s")
        console.print("efficiency: " + ", ".join(f"{k} {v:.1%}" for k, v in (profile.get("efficiency") or {}).items()))
        coll = (profile.get("collectives") or {}).get("gloo") or {}
        if coll:
            console.print("gloo fits: " + ", ".join(f"{op} alpha {f['alpha_s'] * 1e6:.0f} us"
                                                    for op, f in coll.items()))
        console.print(f"calibrated in {wall:.0f} s; records {', '.join(r.id for r in records)}")
    if failed:
        note(f"error: {failed[0].kind} record {failed[0].id} ended {failed[0].status}: {failed[0].error}")
        raise typer.Exit(1)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
