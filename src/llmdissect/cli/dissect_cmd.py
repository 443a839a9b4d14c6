"""`llmdissect dissect pretrain|finetune|infer`: where one step's time goes, by phase, by
module and by operator, under torch.profiler (one `ops` record, config.what = dissect)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from llmdissect.cli import train_cmd as tc
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt

dissect_app = typer.Typer(no_args_is_help=True, help="Where a step's time goes: phases, modules, top operators "
                                                      "(torch.profiler).")
STEPS = typer.Option(3, "--profile-steps", help="Traced steps, each paired with an untraced one.")
TRACE = typer.Option(None, "--trace", help="Write the first traced step as a Chrome/Perfetto trace (JSON).")


def _check(profile_steps: int, trace: Optional[Path]) -> Optional[str]:
    from llmdissect.errors import UserError

    if profile_steps < 1:
        raise UserError(f"--profile-steps must be at least 1, got {profile_steps}")
    if trace is None:
        return None
    trace = Path(trace)
    if trace.is_dir() or not trace.parent.is_dir():
        raise UserError(f"--trace {trace}: not a file in an existing folder")
    return str(trace.resolve())


def show(record) -> None:
    from llmdissect.console import console, human_seconds, table

    m, c = record.metrics, record.config
    console.print(table(f"dissect {c['workload']} {c['model']}: phases (median of {c['profile_steps']} traced steps)",
                        ["phase", "time", "share"],
                        [(k, human_seconds(v), f"{m['phases_share'][k]:.1%}") for k, v in m["phases_s"].items()]))
    hidden = ("loss", "optimizer", "communication") if c["workload"] == "infer" else ()
    console.print(table("modules (shares of the step add to 100 %)", ["module", "time", "share"],
                        [(k, human_seconds(v), f"{m['modules_share'][k]:.1%}") for k, v in m["modules_s"].items()
                         if not (k in hidden and v == 0)]))
    console.print(table("top operators (self time per step)", ["operator", "time", "calls", "share"],
                        [(o["op"], human_seconds(o["self_s"]), f"{o['calls']:.0f}", f"{o['share']:.1%}")
                         for o in m["top_ops"]]))
    console.print(f"profiled step {human_seconds(m['profiled_step_s'])} vs untraced "
                  f"{human_seconds(m['untraced_step_s'])} (medians, steps alternating): "
                  f"profiling overhead {m['profiling_overhead']:+.1%}")
    if m.get("trace"):
        console.print(f"trace: {m['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
    console.print(f"record {record.id} stored")


def _run(target: str, child_config: dict[str, Any], record_config: dict[str, Any], db, json_out: bool,
         timeout: float, threads: Optional[int]) -> None:
    from llmdissect.cli.recording import finish
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.progress import run_with_progress
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now
    from llmdissect.results.store import check_writable

    db_path = check_writable(db)
    started = utc_now()
    child = run_with_progress(lambda cfg: run_child(target, cfg, timeout_s=timeout, threads=threads), child_config,
                              "dissect", True)
    record = record_from_child("ops", record_config, child, capture_env(), started_at=started)
    finish(record, db_path, json_out, show, user_error=child.user_error)


def _train(kind: str, opts: dict, profile_steps: int, trace: Optional[Path], db, json_out: bool, timeout: float,
           threads: Optional[int]) -> None:
    from llmdissect.errors import UserError
    from llmdissect.workloads.train_config import record_config
    from llmdissect.workloads.train_launch import prepare

    cfg = prepare(kind, **opts)
    if cfg.world_size > 1:
        raise UserError("dissect profiles one process; run it without --nproc/--nnodes (communication is 0 there)")
    trace_path = _check(profile_steps, trace)
    rec = {"what": "dissect", "workload": kind, **record_config(cfg), "profile_steps": profile_steps}
    _run("llmdissect.workloads.dissect_train_child:run", {"train": cfg.model_dump(), "profile_steps": profile_steps,
                                              "trace": trace_path}, rec, db, json_out, timeout, threads)


def pretrain(model: str = tc.M, recompute: str = tc.RECOMPUTE, attn: str = tc.ATTN, dtype: str = tc.DTYPE,
             optimizer: str = tc.OPT, micro_batch: int = tc.MB, seq: int = tc.SEQ, grad_accum: int = tc.ACCUM,
             warmup: int = tc.WARM, compile_: bool = tc.COMPILE, data: Optional[str] = tc.DATA,
             tokenizer: Optional[str] = tc.TOK, seed: int = tc.SEED, device: str = tc.DEVICE, lr: float = tc.LR,
             profile_steps: int = STEPS, trace: Optional[Path] = TRACE, timeout: float = tc.TIMEOUT,
             threads: Optional[int] = tc.THREADS, db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Profile pre-training steps (the options of `bench pretrain`, one process)."""
    opts = tc._common(model, None, 0, "none", recompute, attn, dtype, optimizer, micro_batch, seq, grad_accum, 1,
                      warmup, 1, 1, None, compile_, data, tokenizer, seed, device, lr)
    _train("pretrain", opts, profile_steps, trace, db, json_out, timeout, threads)


def finetune(model: str = tc.M, method: str = typer.Option("lora", "--method", help="full | lora | qlora."),
             lora_rank: int = typer.Option(8, "--lora-rank"), lora_alpha: int = typer.Option(16, "--lora-alpha"),
             lora_targets: str = typer.Option("q_proj,k_proj,v_proj,o_proj", "--lora-targets"),
             recompute: str = tc.RECOMPUTE, attn: str = tc.ATTN, dtype: str = tc.DTYPE, optimizer: str = tc.OPT,
             micro_batch: int = tc.MB, seq: int = tc.SEQ, grad_accum: int = tc.ACCUM, warmup: int = tc.WARM,
             seed: int = tc.SEED, device: str = tc.DEVICE, lr: float = tc.LR, profile_steps: int = STEPS,
             trace: Optional[Path] = TRACE, timeout: float = tc.TIMEOUT, threads: Optional[int] = tc.THREADS,
             db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Profile fine-tuning steps: full, LoRA or QLoRA (the options of `bench finetune`, one process)."""
    opts = tc._common(model, None, 0, "none", recompute, attn, dtype, optimizer, micro_batch, seq, grad_accum, 1,
                      warmup, 1, 1, None, False, None, None, seed, device, lr)
    opts.update(method=method, lora_rank=lora_rank, lora_alpha=lora_alpha, lora_targets=lora_targets)
    _train("finetune", opts, profile_steps, trace, db, json_out, timeout, threads)


def infer(model: str = typer.Option("tiny-llama", "--model"), batch: int = typer.Option(1, "--batch"),
          input_len: int = typer.Option(128, "--input-len"), output_len: int = typer.Option(16, "--output-len"),
          dtype: str = typer.Option("fp32", "--dtype"), attn: str = typer.Option("sdpa", "--attn"),
          cache: str = typer.Option("dynamic", "--cache"), quant: str = typer.Option("none", "--quant"),
          warmup: int = typer.Option(1, "--warmup"), seed: int = typer.Option(0, "--seed"),
          device: str = typer.Option("auto", "--device"), profile_steps: int = STEPS, trace: Optional[Path] = TRACE,
          timeout: float = tc.TIMEOUT, threads: Optional[int] = tc.THREADS, db: DbPath = DbOpt,
          json_out: bool = JsonOpt) -> None:
    """Profile offline generate calls (the options of `bench infer`, one point): prefill, decode, modules."""
    from llmdissect.errors import UserError
    from llmdissect.workloads.infer_launch import expand_grid, skip_reason

    if batch < 1 or input_len < 1 or output_len < 1:
        raise UserError("--batch, --input-len and --output-len must be at least 1")
    point = expand_grid(model=model, batch=[batch], input_len=[input_len], output_len=[output_len], dtype=dtype,
                        attn=attn, cache=[cache], quant=[quant], compile=False, warmup=warmup, repeats=1, seed=seed,
                        device=device)[0]
    reason = skip_reason(point)
    if reason:
        raise UserError(reason)
    trace_path = _check(profile_steps, trace)
    rec = {"what": "dissect", "workload": "infer", **point.to_config(), "profile_steps": profile_steps}
    _run("llmdissect.workloads.dissect_infer_child:run",
         {**point.to_config(), "profile_steps": profile_steps, "trace": trace_path}, rec, db, json_out, timeout, threads)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    dissect_app.command("pretrain")(pretrain)
    dissect_app.command("finetune")(finetune)
    dissect_app.command("infer")(infer)
    app.add_typer(dissect_app, name="dissect")
