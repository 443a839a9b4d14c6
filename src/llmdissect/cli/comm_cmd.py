"""`llmdissect bench comm`: collective bandwidth with nccl-tests semantics, over torch.distributed."""
from __future__ import annotations

from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt


def comm(
    nproc: int = typer.Option(2, help="Processes on this node (one per GPU with nccl)."),
    ops: str = typer.Option("all_reduce", help="Comma-separated: all_reduce, all_gather, reduce_scatter, "
                                               "broadcast, reduce, all_to_all, send_recv, or 'all'."),
    min_bytes: str = typer.Option("1K", help="Smallest size (nccl-tests' size; 1K = 1024 bytes)."),
    max_bytes: str = typer.Option("64M", help="Largest size."),
    factor: float = typer.Option(2.0, help="Each size is the previous one times this."),
    dtype: str = typer.Option("fp32", help="fp32 | bf16 | fp16."),
    iters: int = typer.Option(20, help="Timed iterations per size (each checked for correctness)."),
    warmup: int = typer.Option(5, help="Untimed iterations before them."),
    min_time_s: float = typer.Option(0.0, help="Time a size past --iters until its calls add up to this many "
                                                "seconds (steadier medians for small sizes); 0: exactly --iters."),
    max_iters: Optional[int] = typer.Option(None, help="The most timed iterations --min-time-s may reach "
                                                       "(default 5 x --iters)."),
    passes: int = typer.Option(1, help="Sweep the sizes this many times, each with 1/passes of the calls, and "
                                       "keep each size's quietest pass (steadier on a shared machine)."),
    backend: Optional[str] = typer.Option(None, help="gloo | nccl (default: nccl where CUDA is available)."),
    nnodes: int = typer.Option(1, help="Nodes (run the same command on each)."),
    node_rank: int = typer.Option(0, help="This node's rank (the node that gets global rank 0 reports the rows)."),
    rdzv_endpoint: Optional[str] = typer.Option(None, help="HOST:PORT of the rendezvous, for --nnodes > 1."),
    timeout_s: float = typer.Option(900.0, help="Stop the whole run (every rank) after this long."),
    profile: bool = typer.Option(True, help="Store the alpha-beta fits in this machine's calibration profile."),
    db: DbPath = DbOpt,
    json_out: bool = JsonOpt,
    check_offset: Optional[float] = typer.Option(None, hidden=True, help="Test hook: shift expected values."),
    die_rank: Optional[int] = typer.Option(None, hidden=True, help="Test hook: this rank exits mid-run."),
    hang_rank: Optional[int] = typer.Option(None, hidden=True, help="Test hook: this rank hangs mid-run."),
) -> None:
    """Time collectives for a range of sizes; check every result; fit latency and bandwidth."""
    from llmdissect.cli.recording import finish
    from llmdissect.config import parse_config
    from llmdissect.micro.comm_config import CommRequest
    from llmdissect.micro.comm_launch import build_config, run_comm, store_fits
    from llmdissect.results.store import check_writable

    req = parse_config(CommRequest, ops=ops, min_bytes=min_bytes, max_bytes=max_bytes, factor=factor, dtype=dtype,
                       iters=iters, warmup=warmup, min_time_s=min_time_s, max_iters=max_iters, passes=passes,
                       backend=backend,
                       nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                       rdzv_endpoint=rdzv_endpoint, timeout_s=timeout_s,
                       hooks={"check_offset": check_offset, "die_rank": die_rank, "hang_rank": hang_rank})
    config = build_config(req)
    db_path = check_writable(db)
    record, child = run_comm(config, req)
    profile_path = store_fits(record) if profile else None
    finish(record, db_path, json_out, lambda r: show(r, profile_path), user_error=child.user_error)


def _iterations(c: dict) -> str:
    over = f" over {c['passes']} passes" if c.get("passes", 1) > 1 else ""
    if c.get("min_time_s"):
        return f"{c['iters']}-{c['max_iters']} iterations (until {c['min_time_s']:g} s per size){over}"
    return f"{c['iters']} iterations{over}"


def show(record, profile_path=None) -> None:
    """nccl-tests' table per operator, the average bus bandwidth and the fits."""
    from llmdissect.console import console, table

    m, c = record.metrics, record.config
    rows = m.get("rows") or []
    if not rows:
        console.print(f"node {m.get('node_rank', '?')}: its ranks finished and checked their results; the node "
                      "that got global rank 0 reports the rows")
        return
    console.print(f"# {c['backend']}, {c['world_size']} ranks ({c['nnodes']} node(s)), {c['dtype']}, "
                  f"{_iterations(c)} after {c['warmup']} warm-up; time = median over iterations of the "
                  f"slowest rank; every result checked")
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        placements = list(dict.fromkeys(r["placement"] for r in mine))
        cols = ["size (B)", "count", "type", "redop", "root"]
        for p in placements:
            cols += [f"{p} (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"]
        lines = []
        for size in dict.fromkeys(r[mn.SIZE_BYTES] for r in mine):
            first = next(r for r in mine if r[mn.SIZE_BYTES] == size)
            root = "-" if first["root"] is None else first["root"]
            line = [size, first[mn.COUNT], first["dtype"], first["redop"], root]
            for p in placements:
                r = next(x for x in mine if x[mn.SIZE_BYTES] == size and x["placement"] == p)
                line += [f"{r[mn.TIME_S]['median'] * 1e6:.1f}", f"{r[mn.ALGBW_BYTES_PER_S] / 1e9:.3f}",
                         f"{r[mn.BUSBW_BYTES_PER_S] / 1e9:.3f}", r[mn.WRONG]]
            lines.append(line)
        console.print(table(f"{op} (busbw factor {mine[0]['busbw_factor']:.4g})", cols, lines))
    console.print(f"# Avg bus bandwidth: {m[mn.AVG_BUSBW_BYTES_PER_S] / 1e9:.4g} GB/s (mean over all rows)")
    fits = m.get("fits") or {}
    if fits:
        console.print(table("Alpha-beta fit: time = alpha + beta x size",
                            ["op", "alpha (us)", "1/beta (GB/s)", "rms error", "max error", "sizes"],
                            [(op, f"{f[mn.ALPHA_S] * 1e6:.1f}",
                              f"{1 / f[mn.BETA_S_PER_BYTE] / 1e9:.3f}" if f[mn.BETA_S_PER_BYTE] > 0 else "-",
                              f"{f[mn.FIT_ERROR]:.1%}", f"{f[mn.FIT_MAX_ERROR]:.1%}", f["points"])
                             for op, f in fits.items()]))
    if profile_path:
        console.print(f"fits stored in {profile_path}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("comm")(comm)
