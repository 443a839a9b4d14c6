"""`llmdissect bench infer`: measured offline inference over a grid of points (issue #6)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import typer

from llmdissect.cli.options import DbOpt, DbPath, JsonOpt

if TYPE_CHECKING:
    from llmdissect.workloads.infer_config import InferPoint

GRID_HELP = "Comma-separated list; every combination is one grid point."


def infer(
    model: str = typer.Option("tiny-llama", help="Model preset, config.json, or a local model folder (its weights "
                                                 "are loaded when it has safetensors; otherwise random weights)."),
    batch: str = typer.Option("1", help=f"Batch size(s). {GRID_HELP}"),
    input_len: str = typer.Option("128", help=f"Prompt length(s) in tokens (random ids, fixed seed). {GRID_HELP}"),
    output_len: str = typer.Option("64", help=f"Output length(s) in tokens, fixed: EOS ignored. {GRID_HELP}"),
    dtype: str = typer.Option("fp32", help="Compute dtype: fp32 | bf16 | fp16 (fp32 on CPU: half precision is "
                                           "~100x slower there)."),
    attn: str = typer.Option("sdpa", help="Attention: eager | sdpa | flash (flash needs CUDA)."),
    cache: str = typer.Option("dynamic", help=f"KV cache: dynamic | static. {GRID_HELP}"),
    quant: str = typer.Option("none", help="Weight quantization: none | int8-weight | int8-dynamic | int4-weight | "
                                           f"nf4 | int8-bnb (int4-weight needs CUDA + bf16). {GRID_HELP}"),
    group_size: int = typer.Option(0, "--group-size", help="int4-weight's group size: 32 | 64 | 128 | 256 "
                                                              "(0: torchao's 128)."),
    compile: bool = typer.Option(False, "--compile/--no-compile", help="torch.compile the model's forward; the "
                                                                       "compile time lands in first_call_s."),
    warmup: int = typer.Option(1, help="Untimed generate calls per point; the first is reported as first_call_s."),
    repeats: int = typer.Option(3, help="Timed generate calls per point (Stats over them)."),
    seed: int = typer.Option(0, help="Seed of the random weights and prompt ids."),
    device: str = typer.Option("auto", help="auto | cpu | cuda (auto: the first GPU when one is visible)."),
    timeout_s: float = typer.Option(1800.0, "--timeout-s", help="Per-point limit; a point past it is recorded "
                                                                 "as timeout."),
    threads: Optional[int] = typer.Option(None, help="Compute threads of the child (default: the usable cores; "
                                                     "the env of the record says how many ran)."),
    usd_per_hour: Optional[float] = typer.Option(None, help="Price of the device, USD/hour: the record states USD "
                                                 "per million input (prefill) and output (decode) tokens (default: "
                                                 "the hardware catalogue's price, where it has one)."),
    db: DbPath = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Time generate: TTFT, TPOT, e2e latency, prefill and decode tokens/s, KV-cache bytes, peak memory, \
and what the hardware allows.

    Each grid point runs in a fresh child process and is stored as one record: ok, or skipped with the reason \
where this device cannot run it.

    --json prints one JSON record per line, one line per grid point (exactly one record for a single point).

    Exit 0 when every point is ok (or skipped inside a grid); 2 for bad input or a single point that cannot run \
here; 1 when a point failed, ran out of memory or timed out.
    """
    from llmdissect.console import note
    from llmdissect.dtypes import cpu_dtype_note
    from llmdissect.results.store import check_writable
    from llmdissect.workloads.infer_launch import expand_grid, parse_list

    db_path = check_writable(db)
    points = expand_grid(model=model, batch=parse_list(batch, "--batch"),
                         input_len=parse_list(input_len, "--input-len"),
                         output_len=parse_list(output_len, "--output-len"), dtype=dtype, attn=attn,
                         cache=parse_list(cache, "--cache", str), quant=parse_list(quant, "--quant", str),
                         compile=compile, warmup=warmup, repeats=repeats, seed=seed, device=device,
                         group_size=group_size)
    dtype_note = cpu_dtype_note(dtype, points[0].device)
    if dtype_note:
        note(f"note: {dtype_note}")
    if threads is not None and threads < 1:
        from llmdissect.errors import UserError

        raise UserError(f"--threads must be >= 1, got {threads}")
    from llmdissect.workloads.cost import price_for

    price_for(None, 1, usd_per_hour)  # a bad price is bad input before anything runs
    records = _run_all(points, db_path, timeout_s, threads, usd_per_hour)
    if len(points) == 1:
        from llmdissect.cli.recording import finish

        record, user_error = records[0]
        # already stored by _run_all: finish() stores again under the same id (an upsert)
        finish(record, db_path, json_out, _show_point, user_error=user_error or record.status == "skipped")
        return
    _finish_grid([r for r, _ in records], json_out)


def _run_all(points: list[InferPoint], db_path, timeout_s: float, threads: int | None,
             usd_per_hour: float | None = None) -> list[tuple[Any, bool]]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from llmdissect.results.recording import save
    from llmdissect.workloads.cost import add_cost
    from llmdissect.workloads.infer_launch import run_point

    out = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("bench infer", total=len(points))
        for p in points:
            progress.update(task, description=f"infer {p.quant} {p.cache} b={p.batch} "
                                              f"in={p.input_len} out={p.output_len}")
            record, user_error = run_point(p, timeout_s, threads)
            add_cost(record, usd_per_hour)
            save(record, db_path)  # each point is stored as soon as it ends
            out.append((record, user_error))
            progress.advance(task)
    return out


def _finish_grid(records: list[Any], json_out: bool) -> None:
    from llmdissect.console import console, err_console, print_json

    if json_out:
        for r in records:
            print_json(r.to_dict())
    else:
        from llmdissect.cli.infer_show import grid_table

        console.print(grid_table(records))
    for r in records:
        if r.status == "skipped":
            err_console.print(f"skipped {r.config['quant']} {r.config['cache']} b={r.config['batch']}: {r.error}")
    bad = [r for r in records if r.status not in ("ok", "skipped")]
    for r in bad:
        err_console.print(f"error: run {r.id} ended with status {r.status}: {r.error}")
    if bad:
        raise typer.Exit(1)


def _show_point(record: Any) -> None:
    from llmdissect.cli.infer_show import show_point

    show_point(record)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("infer")(infer)
