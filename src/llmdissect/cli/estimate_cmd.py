"""`llmdissect estimate pretrain|finetune|infer`: predict memory, time and throughput.

No torch, no measurement: the analytical model of `llmdissect.perfmodel`, fed by the specs
and this machine's calibration profile. The record (source: estimated) is stored too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt
from llmdissect.console import console, human_bytes, human_count, human_rate, human_seconds, print_json, table


def estimate(
    kind: str = typer.Argument(..., help="pretrain | finetune | infer"),
    model: str = typer.Option(..., "--model", help="Model preset, TOML, or config.json."),
    hardware: str = typer.Option(..., "--hardware", help="A device (a800, h100, cpu) or a platform (8xa800)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Number of devices (default: the platform's)."),
    dtype: Optional[str] = typer.Option(None, "--dtype",
                                        help="fp32 | bf16 | fp16 (default bf16 on GPUs, fp32 on CPU)."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per micro-batch per device [1]."),
    seq: Optional[int] = typer.Option(None, "--seq", help="Training sequence length [2048]."),
    grad_accum: Optional[int] = typer.Option(None, "--grad-accum", help="Micro-batches per optimizer step [1]."),
    zero: Optional[int] = typer.Option(None, "--zero", help="ZeRO stage 0..3 [0]."),
    offload: Optional[str] = typer.Option(None, "--offload", help="none | optimizer | params [none]."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="none | selective | full | op [none]."),
    attn: str = typer.Option("sdpa", "--attn", help="eager | sdpa | flash."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree [1]."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer",
                                            help="adamw | adamw-fused | adamw-8bit | adam | sgd [adamw]."),
    precision: Optional[str] = typer.Option(None, "--precision", help="mixed | pure: pure 16-bit keeps no fp32 "
                                            "master weights, optimizer states in the dtype (training) [mixed]."),
    engine: Optional[str] = typer.Option(None, "--engine", help="single | ddp | fsdp | deepspeed (training) "
                                                                "[as bench pretrain picks]."),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank", help="LoRA rank (finetune; 0 = full)."),
    lora_targets: Optional[str] = typer.Option(None, "--lora-targets", help="Modules with adapters "
                                               "[q_proj,k_proj,v_proj,o_proj] or 'all'."),
    quant: str = typer.Option("none", "--quant", help="none | int8 | int8-bnb | nf4 | ... (QLoRA base, or "
                                                      "inference weights)."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Sequences per batch (infer) [1]."),
    input_len: Optional[int] = typer.Option(None, "--input-len", help="Prompt tokens (infer) [512]."),
    output_len: Optional[int] = typer.Option(None, "--output-len", help="Generated tokens (infer) [128]."),
    cache: Optional[str] = typer.Option(None, "--cache", help="dynamic | static: generate's KV cache (infer) "
                                                              "[dynamic]."),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="Calibration profile (default: this machine's)."),
    store: bool = typer.Option(True, "--store/--no-store", help="Store the estimate in the results database."),
    db: DbPath = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Predict per-device memory, step time, throughput and MFU of a configuration (no run)."""
    opts = {k: v for k, v in locals().items() if k not in ("kind", "calibration", "store", "db", "json_out")}
    from llmdissect.perfmodel.request import estimate_env, estimate_request, run_estimate

    est = run_estimate(estimate_request(kind, **opts), calibration)
    record = est.to_record(estimate_env(calibration))
    if store:
        from llmdissect.results.store import open_store  # not results.recording: it imports the launcher

        with open_store(db) as s:
            s.add(record)
    if json_out:
        print_json(record.to_dict())
        return
    show_estimate(est, record.id if store else None)


MEMORY_ROWS = (mn.PARAMS_BYTES, mn.GRADS_BYTES, mn.OPTIMIZER_BYTES, mn.ACTIVATIONS_BYTES, mn.KV_CACHE_BYTES,
               "step_peak_bytes", mn.OTHER_BYTES, mn.TOTAL_BYTES, "host_total_bytes")


def show_estimate(est, record_id: str | None) -> None:
    m, c = est.metrics, est.config
    title = (f"Estimate: {est.kind} {c['model']} on {c['hardware']} ({c['dtype']}"
             + (f", ZeRO-{c['zero']}, offload {c['offload']}, recompute {c['recompute']}" if "zero" in c else "")
             + f", attn {c['attn']}, tp {c['tp']}" + (f", pp {c['pp']}" if "pp" in c else "") + ")")
    rows = [(f"memory.{k}", human_bytes(m[mn.MEMORY][k])) for k in MEMORY_ROWS if k in m[mn.MEMORY]]
    for k, v in (m.get(mn.TIME) or {}).items():
        rows.append((f"time.{k}", human_seconds(v)))
    if m.get(mn.TOKENS_PER_S) is not None:
        rows.append((mn.TOKENS_PER_S, human_rate(m[mn.TOKENS_PER_S], "tok/s")))
    for key in (mn.PREFILL_TOKENS_PER_S, mn.DECODE_TOKENS_PER_S):
        if m.get(key) is not None:
            rows.append((key, human_rate(m[key], "tok/s")))
    if m.get(mn.MFU) is not None:
        rows.append((mn.MFU, f"{m[mn.MFU]:.1%}"))
    if m.get(mn.MODEL_FLOPS_PER_TOKEN) is not None:
        rows.append((mn.MODEL_FLOPS_PER_TOKEN, human_count(m[mn.MODEL_FLOPS_PER_TOKEN])))
    if "max_batch" in m:
        rows.append(("max_batch (KV capacity)", str(m["max_batch"])))
    console.print(title)
    console.print(table(None, ["quantity", "per device"], rows))
    sweep = m.get("batch_sweep") or []
    if len(sweep) > 1:
        console.print("Against batch size, up to the KV-cache capacity:")
        console.print(table(None, ["batch", "ttft", "tpot", "tokens/s"],
                            [(r["batch"], human_seconds(r[mn.TTFT_S]), human_seconds(r[mn.TPOT_S]),
                              human_rate(r[mn.TOKENS_PER_S], "tok/s")) for r in sweep]))
    console.print(("[green]" if est.fits else "[red]") + est.verdict() + ("[/]"))
    for n in est.notes:
        console.print(f"  - {n}", markup=False)
    if record_id:
        console.print(f"stored as {record_id} (source: estimated)")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("estimate")(estimate)
