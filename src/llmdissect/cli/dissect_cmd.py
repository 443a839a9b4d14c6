"""`llmdissect dissect pretrain|finetune|infer`: where one step's time goes, by phase, by
module and by operator, under torch.profiler (one `ops` record, config.what = dissect)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli import train_cmd as tc
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt, config_options

dissect_app = typer.Typer(no_args_is_help=True, help="Where a step's time goes: phases, modules, top operators "
                                                      "(torch.profiler).")
STEPS = typer.Option(3, "--profile-steps", help="Traced steps, each paired with an untraced one.")
TRACE = typer.Option(None, "--trace", help="Write the first traced step as a Chrome/Perfetto trace (JSON).")


def show(record) -> None:
    from llmdissect.console import console, human_seconds, table

    m, c = record.metrics, record.config
    console.print(table(f"dissect {c['workload']} {c['model']}: phases (median of {c['profile_steps']} traced steps)",
                        ["phase", "time", "share"],
                        [(k, human_seconds(v), f"{m['phases_share'][k]:.1%}") for k, v in m["phases_s"].items()]))
    hidden = ("loss", "optimizer", "communication") if c["workload"] == mn.INFER else ()
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


# Command arguments that are not fields of the point profiled: how to run and where to store.
_RUN_ARGS = {"timeout", "threads", "db", "json_out"}


def _run(workload: str, args: dict[str, Any]) -> None:
    """The plan of `workload` from the command's arguments (its `locals()`) by name, then the
    store's check, the profiling child and the record."""
    from llmdissect.cli.recording import finish
    from llmdissect.results.store import check_writable
    from llmdissect.workloads.dissect_launch import plan_for, run_dissect

    plan = plan_for(workload, **config_options(args, _RUN_ARGS))
    db_path = check_writable(args["db"])
    record, child = run_dissect(plan, timeout_s=args["timeout"], threads=args["threads"])
    finish(record, db_path, args["json_out"], show, user_error=child.user_error)


def pretrain(model: str = tc.M, recompute: str = tc.RECOMPUTE, attn: str = tc.ATTN, dtype: str = tc.DTYPE,
             optimizer: str = tc.OPT, micro_batch: int = tc.MB, seq: int = tc.SEQ, grad_accum: int = tc.ACCUM,
             warmup: int = tc.WARM, compile_: bool = tc.COMPILE, data: Optional[str] = tc.DATA,
             tokenizer: Optional[str] = tc.TOK, seed: int = tc.SEED, device: str = tc.DEVICE, lr: float = tc.LR,
             nproc: int = tc.NPROC, zero: int = tc.ZERO, ep: int = tc.EP,
             profile_steps: int = STEPS, trace: Optional[Path] = TRACE, timeout: float = tc.TIMEOUT,
             threads: Optional[int] = tc.THREADS, db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Profile pre-training steps (the options of `bench pretrain`; with --nproc, rank 0's
    profile, its collectives as `communication`)."""
    _run("pretrain", locals())


def finetune(model: str = tc.M, method: str = typer.Option("lora", "--method", help="full | lora | qlora."),
             lora_rank: int = typer.Option(8, "--lora-rank"), lora_alpha: int = typer.Option(16, "--lora-alpha"),
             lora_targets: str = typer.Option("q_proj,k_proj,v_proj,o_proj", "--lora-targets",
                                              help="Modules with adapters; `experts`: a MoE model's routed experts."),
             recompute: str = tc.RECOMPUTE, attn: str = tc.ATTN, dtype: str = tc.DTYPE, optimizer: str = tc.OPT,
             micro_batch: int = tc.MB, seq: int = tc.SEQ, grad_accum: int = tc.ACCUM, warmup: int = tc.WARM,
             seed: int = tc.SEED, device: str = tc.DEVICE, lr: float = tc.LR, nproc: int = tc.NPROC,
             zero: int = tc.ZERO, ep: int = tc.EP, profile_steps: int = STEPS,
             trace: Optional[Path] = TRACE, timeout: float = tc.TIMEOUT, threads: Optional[int] = tc.THREADS,
             db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Profile fine-tuning steps: full, LoRA or QLoRA (the options of `bench finetune`; with
    --nproc, rank 0's profile)."""
    _run("finetune", locals())


def infer(model: str = typer.Option("tiny-llama", "--model"), batch: int = typer.Option(1, "--batch"),
          input_len: int = typer.Option(128, "--input-len"), output_len: int = typer.Option(16, "--output-len"),
          dtype: str = typer.Option("fp32", "--dtype"), attn: str = typer.Option("sdpa", "--attn"),
          cache: str = typer.Option("dynamic", "--cache"), quant: str = typer.Option("none", "--quant"),
          warmup: int = typer.Option(1, "--warmup"), seed: int = typer.Option(0, "--seed"),
          device: str = typer.Option("auto", "--device"), profile_steps: int = STEPS, trace: Optional[Path] = TRACE,
          timeout: float = tc.TIMEOUT, threads: Optional[int] = tc.THREADS, db: DbPath = DbOpt,
          json_out: bool = JsonOpt) -> None:
    """Profile offline generate calls (the options of `bench infer`, one point): prefill, decode, modules."""
    _run("infer", locals())


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    dissect_app.command("pretrain")(pretrain)
    dissect_app.command("finetune")(finetune)
    dissect_app.command("infer")(infer)
    app.add_typer(dissect_app, name="dissect")
