"""`llmdissect advise pretrain|finetune|infer`: search the configuration space with the
analytical model, drop what does not fit (saying why) and show the Pareto front of
throughput against memory with the best configurations for a goal. `advise serve`: the
split of the devices into replicas x TP that sustains the highest request rate within an
SLO, by the serving simulation (analysis.serve_advise)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import JsonOpt
from llmdissect.console import console, human_bytes, human_rate, human_seconds, print_json, table


def _space(kind: str, model: str, hardware: str, gpus: Optional[int], dtype: Optional[str], seq: Optional[int],
           input_len: int, output_len: int, calibration: Optional[Path]):
    from llmdissect.calibration_profile import load_profile
    from llmdissect.dtypes import check_compute_dtype, dtype_bytes
    from llmdissect.errors import UserError
    from llmdissect.perfmodel.advise import infer_space, train_space
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.specs import get_model, resolve_platform

    if kind not in (mn.PRETRAIN, mn.FINETUNE, mn.INFER):
        raise UserError(f"unknown advise kind {kind!r}; choose one of pretrain, finetune, infer")
    m = get_model(model)
    plat = resolve_platform(hardware, gpus)
    dtype = check_compute_dtype(dtype or ("fp32" if plat.device.kind == "cpu" else "bf16"))
    mach = machine_for(plat, dtype, load_profile(calibration, required=calibration is not None),
                       explicit=calibration is not None)
    if mach.ceilings is None:
        raise UserError(f"{plat.device.name} has no known {dtype} peak; run `llmdissect peak` or pass --calibration")
    seq = seq or min(2048, m.max_position_embeddings)
    for name, v in (("seq", seq), ("input-len", input_len), ("output-len", output_len)):
        if v <= 0:
            raise UserError(f"--{name} must be a positive integer, got {v}")
    if kind == mn.INFER:
        if input_len + output_len > m.max_position_embeddings:
            raise UserError(f"--input-len + --output-len is longer than {m.name} allows ({m.max_position_embeddings})")
        space = infer_space(m, mach, input_len, output_len, dtype_bytes(dtype))
    else:
        if seq > m.max_position_embeddings:
            raise UserError(f"--seq {seq} is longer than {m.name} allows ({m.max_position_embeddings} positions)")
        space = train_space(kind, m, mach, seq, dtype_bytes(dtype))
    config = {"model": m.name, "hardware": plat.name, "nproc": plat.num_devices, "dtype": dtype,
              "kind_estimated": kind}
    config.update({"input_len": input_len, "output_len": output_len} if kind == mn.INFER else {"seq": seq})
    return space, config, plat


def _why(row: dict, plat) -> str:
    gib = 2 ** 30
    if not row["fits_device"]:
        return f"needs {row[mn.TOTAL_BYTES] / gib:.1f} GiB > {plat.device.memory_bytes / gib:.0f} GiB per device"
    return f"host memory: {row['host_bytes'] / gib:.0f} GiB > {(plat.host_memory_bytes or 0) / gib:.0f} GiB"


def advise(
    kind: str = typer.Argument(..., help="pretrain | finetune | infer | serve"),
    model: str = typer.Option(..., "--model", help="Model preset, TOML, or config.json."),
    hardware: str = typer.Option(..., "--hardware", help="A device or a platform (8xa800)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Number of devices (default: the platform's)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="fp32 | bf16 | fp16."),
    seq: Optional[int] = typer.Option(None, "--seq", help="Training sequence length [2048]."),
    input_len: int = typer.Option(512, "--input-len", help="Prompt tokens (infer, serve)."),
    output_len: int = typer.Option(128, "--output-len", help="Generated tokens (infer, serve)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="serve: the limits a request must meet, e.g. "
                                      "ttft=0.5,tpot=0.05 (required)."),
    attainment: float = typer.Option(0.99, "--attainment", help="serve: share of requests that must meet the SLO."),
    profile: Optional[str] = typer.Option(None, "--profile", help="serve: vllm | vllm-large | sglang | transformers "
                                          "[vllm on GPUs]."),
    num_prompts: int = typer.Option(400, "--num-prompts", help="serve: requests each simulated probe sends."),
    usd_per_hour: Optional[float] = typer.Option(None, "--usd-per-hour", help="serve: price of one device per hour, "
                                                 "for the cost per million output tokens."),
    goal: str = typer.Option("throughput", "--goal", help="throughput | memory | latency."),
    top: int = typer.Option(10, "--top", help="How many of the best configurations to show."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile."),
    json_out: bool = JsonOpt,
) -> None:
    """Find the best configurations of a model on a platform (no run): Pareto front and top list."""
    import time

    import numpy as np

    from llmdissect.errors import UserError
    from llmdissect.perfmodel.advise import pareto_front, ranking

    if top <= 0:
        raise UserError(f"--top must be positive, got {top}")
    if kind == mn.SERVE:
        options = {"model": model, "hardware": hardware, "dtype": dtype, "profile": profile,
                   "num_prompts": num_prompts, "input_len": input_len, "output_len": output_len, "slo": slo}
        _advise_serve(options, gpus, attainment, usd_per_hour, calibration, json_out)
        return
    t0 = time.perf_counter()
    space, config, plat = _space(kind, model, hardware, gpus, dtype, seq, input_len, output_len, calibration)
    best = ranking(space, goal)
    elapsed = time.perf_counter() - t0
    r = space.results
    fit_idx = np.flatnonzero(r[mn.FITS])
    front = fit_idx[pareto_front(r[mn.TOKENS_PER_S][fit_idx], r[mn.TOTAL_BYTES][fit_idx])]
    dropped = np.flatnonzero(~r[mn.FITS])
    worth = dropped[np.argsort(-r[mn.TOKENS_PER_S][dropped], kind="stable")][:3]
    summary = {"evaluated": len(space), "fitting": int(fit_idx.size),
               "dropped_device_memory": int((~r["fits_device"]).sum()),
               "dropped_host_memory": int((r["fits_device"] & ~r[mn.FITS]).sum()),
               "configs_per_s": len(space) / elapsed, "search_s": elapsed}
    rows = {"front": [space.row(int(i)) for i in front], "top": [space.row(int(i)) for i in best[:top]],
            "dropped_best": [{**space.row(int(i)), "why": _why(space.row(int(i)), plat)} for i in worth]}
    if json_out:
        from llmdissect.results.schema import RunRecord

        config["goal"] = goal
        rec = RunRecord(kind=mn.PLAN, source="estimated", config=config, metrics={**summary, **rows}).finish("ok")
        print_json(rec.to_dict())
        return
    show_advice(kind, config, goal, summary, rows)


def _advise_serve(options: dict, gpus: Optional[int], attainment: float, usd_per_hour: Optional[float],
                  calibration: Optional[Path], json_out: bool) -> None:
    import time

    from llmdissect.analysis.serve_advise import advise_serve
    from llmdissect.specs import resolve_platform

    plat = resolve_platform(options["hardware"], gpus)
    options = {**options, "gpus": plat.num_devices}
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from llmdissect.console import err_console

    t0 = time.perf_counter()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task("advise serve", total=None)

        def moved(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=f"advise serve: {name}")

        results = advise_serve(options, plat.num_devices, attainment, usd_per_hour, calibration, on_split=moved)
    rows = [r.to_dict() for r in results]
    if json_out:
        from llmdissect.results.schema import RunRecord

        config = {**options, "attainment": attainment, "usd_per_hour": usd_per_hour, "kind_estimated": mn.SERVE}
        print_json(RunRecord(kind=mn.PLAN, source="estimated", config=config,
                             metrics={"splits": rows, "search_s": time.perf_counter() - t0}).finish("ok").to_dict())
        return
    console.print(f"Advice: serve {options['model']} on {plat.num_devices} x {plat.device.name}, "
                  f"{options['input_len']} + {options['output_len']} tokens a request, SLO {options['slo']} for "
                  f"{attainment:.0%} of requests ({time.perf_counter() - t0:.1f} s, "
                  f"{sum(r['probes'] for r in rows)} simulated runs of {options['num_prompts']} requests)")
    body = [(f"{r['replicas']} x tp {r['tp']}", f"{r['max_rate_per_s']:.3g}/s",
             human_seconds(r["ttft_p99_s"]) if r["ttft_p99_s"] is not None else "-",
             human_seconds(r["tpot_p99_s"]) if r["tpot_p99_s"] is not None else "-",
             human_rate(r[mn.OUTPUT_TOKENS_PER_S], "tok/s") if r[mn.OUTPUT_TOKENS_PER_S] else "-",
             f"${r['usd_per_m_output_tokens']:.3g}" if r["usd_per_m_output_tokens"] else "-") for r in rows]
    console.print(table("Highest request rate within the SLO, per split", ["replicas x tp", "max rate", "ttft p99",
                                                                           "tpot p99", "output tok/s",
                                                                           "per 1M output tokens"], body))
    if rows[0]["max_rate_per_s"] <= 0:
        console.print("[red]no split meets the SLO even at the lowest rate[/]")


RESULT_KEYS = (mn.TOTAL_BYTES, "host_bytes", mn.TOKENS_PER_S, mn.STEP_S, mn.TTFT_S, mn.TPOT_S, mn.MFU,
               "fits_device", "fits_host", mn.FITS, "why")


def _rows(items: list[dict]) -> tuple[list[str], list[list[str]]]:
    if not items:
        return [], []
    knobs = [k for k in items[0] if k not in RESULT_KEYS]
    time_key = mn.TPOT_S if mn.TPOT_S in items[0] else mn.STEP_S
    cols = knobs + ["memory/device", "tokens/s", time_key, "mfu"] + (["why"] if "why" in items[0] else [])
    out = []
    for it in items:
        row = [str(it[k]) for k in knobs] + [human_bytes(it[mn.TOTAL_BYTES]), human_rate(it[mn.TOKENS_PER_S], "tok/s"),
                                             human_seconds(it[time_key]), f"{it[mn.MFU]:.1%}"]
        if "why" in it:
            row.append(it["why"])
        out.append(row)
    return cols, out


def show_advice(kind: str, config: dict, goal: str, summary: dict, rows: dict) -> None:
    rate = f" ({summary['configs_per_s']:.3g}/s)" if summary["evaluated"] >= 5000 else ""  # small grids: fixed cost
    console.print(f"Advice: {kind} {config['model']} on {config['hardware']} ({config['dtype']}): "
                  f"{summary['evaluated']} configurations in {summary['search_s'] * 1e3:.0f} ms{rate}; "
                  f"{summary['fitting']} fit, "
                  f"{summary['dropped_device_memory']} need more device memory, "
                  f"{summary['dropped_host_memory']} more host memory")
    if not rows["top"]:
        console.print("[red]no configuration fits[/]; the closest ones:")
    for title, key in (("Pareto front: throughput vs memory per device", "front"),
                       (f"Best for {goal}", "top"), ("Fastest that do not fit, and why", "dropped_best")):
        cols, body = _rows(rows[key])
        if body:
            console.print(table(title, cols, body))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("advise")(advise)
