"""`llmdissect calibrate`: measure this machine's ceilings, efficiencies and collective fits
into its calibration profile (`micro.calibrate_launch`), and show what was stored."""
from __future__ import annotations

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt


def calibrate(model: str = typer.Option("tiny-llama", "--model", help="Model whose operators set the efficiencies."),
              tokens: int = typer.Option(512, "--tokens", help="Tokens through the layer."),
              comm: bool = typer.Option(True, help="Also fit all-reduce/all-gather over 2 gloo processes."),
              db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Measure this machine's ceilings and efficiencies for `estimate` (about 1-2 minutes on a CPU)."""
    import time

    from llmdissect.calibration_profile import load_profile
    from llmdissect.console import console, note, print_json
    from llmdissect.micro.calibrate_launch import run_calibration
    from llmdissect.micro.ops_config import parse_ops_config
    from llmdissect.results.store import check_writable

    parse_ops_config(model=model, tokens=tokens)  # bad input exits 2 before anything runs
    db_path = check_writable(db)
    t0 = time.perf_counter()
    records = run_calibration(db_path, model=model, tokens=tokens, comm=comm, progress=not json_out)
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
            console.print("gloo fits: " + ", ".join(f"{op} alpha {f[mn.ALPHA_S] * 1e6:.0f} us"
                                                    for op, f in coll.items()))
        console.print(f"calibrated in {wall:.0f} s; records {', '.join(r.id for r in records)}")
    if failed:
        note(f"error: {failed[0].kind} record {failed[0].id} ended {failed[0].status}: {failed[0].error}")
        raise typer.Exit(1)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
