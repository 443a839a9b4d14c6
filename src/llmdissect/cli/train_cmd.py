"""`llmdissect bench pretrain` and `llmdissect bench finetune`: measured training steps."""
from __future__ import annotations

from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt, config_options
from llmdissect.console import console, human_bytes, human_count, human_rate, human_seconds, note, table


def _show(record) -> None:
    m, c = record.metrics, record.config
    step = m[mn.STEP_TIME_S]
    rows = [
        ("step time (median / p90)", f"{human_seconds(step['median'])} / {human_seconds(step['p90'])}"),
        ("forward / backward / optimizer (median)",
         " / ".join(human_seconds(m[k]["median"]) for k in (mn.FORWARD_S, mn.BACKWARD_S, mn.OPTIMIZER_S))),
        ("first step (warm-up, excluded)", human_seconds(m.get("first_step_s"))),
        ("tokens/s (per device)", f"{m[mn.TOKENS_PER_S]:.1f} ({m[mn.TOKENS_PER_S_PER_DEVICE]:.1f})"),
        ("samples/s", f"{m['samples_per_s']:.2f}"),
        ("model FLOPs/token", human_count(m[mn.MODEL_FLOPS_PER_TOKEN])),
        ("MFU / HFU", "not available: " + m["peak_flops_source"] if m[mn.MFU] is None
         else f"{m[mn.MFU]:.2%} / {m[mn.HFU]:.2%} of {human_rate(m['peak_flops_per_s'], 'FLOP/s')} per device"),
        ("peak memory (tensors)", human_bytes(m[mn.PEAK_MEMORY_BYTES])),
        ("peak RSS (process)", human_bytes(m[mn.PEAK_RSS_BYTES])),
        ("trainable / total params", f"{human_count(m['trainable_params'])} / {human_count(m['total_params'])}"),
        ("loss (first -> last)", f"{m[mn.LOSS][0]:.4f} -> {m[mn.LOSS][-1]:.4f}"),
    ]
    if m.get(mn.USD_PER_MILLION_TRAINING_TOKENS) is not None:
        rows.append((f"USD per million training tokens (at {m['usd_per_hour']:g} USD/hour)",
                     f"{m[mn.USD_PER_MILLION_TRAINING_TOKENS]:.4g} ({m['usd_per_hour_source']})"))
    if m.get(mn.ENERGY_J) is not None:
        rows.append(("energy (timed steps, per token)", f"{m[mn.ENERGY_J]:.4g} J, "
                     f"{m.get(mn.ENERGY_J_PER_TRAINING_TOKEN) or 0:.4g} J ({'+'.join(m['energy_sources'])})"))
    elif m.get("energy_not_measured"):
        rows.append(("energy", f"not measured: {m['energy_not_measured']}"))
    tp = f" (tp {c['tp']} x dp {c['dp']})" if c.get("tp", 1) > 1 else ""
    tp += f" (experts over ep {c['ep']})" if c.get("ep", 1) > 1 else ""
    title = (f"{record.kind} {c['model']}: {c['engine']} x{c['nproc'] * c['nnodes']}{tp}, ZeRO-{c['zero']}, "
             f"offload {c['offload']}, recompute {c['recompute']}, attn {c['attn']}, {c['dtype']}, "
             f"mb {c['micro_batch']} x seq {c['seq']} x accum {c['grad_accum']}"
             + (f", {c['method']} r={c.get('lora_rank')}" if c.get("method", "full") != "full" else ""))
    console.print(table(title, ["metric", "value"], rows, justify_numbers=False))
    if m.get("note"):
        note(f"note: {m['note']}")
    console.print(f"record {record.id} stored")


def _bench(kind: str, options: dict, db, json_out: bool, timeout: float, max_memory: Optional[str],
           threads: Optional[int], usd_per_hour: Optional[float]) -> None:
    from llmdissect.cli.recording import finish
    from llmdissect.dtypes import cpu_dtype_note
    from llmdissect.results.store import check_writable
    from llmdissect.units import parse_bytes
    from llmdissect.workloads.cost import add_cost, price_for
    from llmdissect.workloads.train_launch import prepare, run_training

    cfg = prepare(kind, **options)
    price_for(None, 1, usd_per_hour)  # a bad price is bad input before anything runs
    limit = parse_bytes(max_memory, "--max-memory") if max_memory else None
    check_writable(db)
    if (msg := cpu_dtype_note(cfg.dtype, cfg.device)) and not json_out:
        note(f"note: {msg}")
    with console.status(f"{kind}: {cfg.model} on {cfg.world_size} process(es)...") if not json_out else _nothing():
        record, child = run_training(cfg, timeout_s=timeout, max_memory_bytes=limit, threads=threads)
    add_cost(record, usd_per_hour)
    finish(record, db, json_out, _show, user_error=child.user_error)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# Command arguments that are not fields of TrainConfig: how to run and where to store.
_RUN_ARGS = {"timeout", "max_memory", "threads", "usd_per_hour", "db", "json_out"}


def _run(kind: str, args: dict) -> None:
    """Split a command's arguments (its `locals()`) into the TrainConfig fields and the run options."""
    _bench(kind, config_options(args, _RUN_ARGS), args["db"], args["json_out"], args["timeout"], args["max_memory"],
           args["threads"], args["usd_per_hour"])


M = typer.Option("tiny-llama", "--model", help="Preset, model TOML, config.json or model folder.")
ENGINE = typer.Option(None, "--engine", help="single | ddp | fsdp | deepspeed (default: from --zero and --nproc).")
DSCONF = typer.Option(None, "--ds-config", help="DeepSpeed JSON config merged with what the options require "
                      "(--engine deepspeed).")
TP = typer.Option(1, "--tp", help="Tensor-parallel size (DTensor, Megatron-style); --nproc = tp x dp.")
EP = typer.Option(1, "--ep", help="Expert-parallel size (MoE models): each rank holds 1/ep of every layer's "
                  "routed experts, tokens go to them by all-to-all; DDP for the rest.")
ZERO = typer.Option(0, "--zero", help="0 DDP, 1 DDP+ZeroRedundancyOptimizer, 2/3 FSDP2 (no/with reshard after "
                    "forward); with --engine deepspeed, DeepSpeed's ZeRO stage.")
OFFLOAD = typer.Option("none", "--offload", help="none | params (FSDP2 CPUOffloadPolicy; deepspeed ZeRO-3) | "
                       "optimizer (deepspeed).")
RECOMPUTE = typer.Option("none", "--recompute", help="none | selective (attention blocks) | full (every layer) | "
                                                        "op (every other matmul kept).")
ATTN = typer.Option("sdpa", "--attn", help="eager | sdpa | flash (CUDA with flash-attn only).")
DTYPE = typer.Option("fp32", "--dtype", help="fp32 | bf16 | fp16 (autocast / FSDP mixed precision). CPU default fp32.")
OPT = typer.Option("adamw", "--optimizer", help="adamw | adamw-fused | adamw-8bit (bitsandbytes).")
MB = typer.Option(1, "--micro-batch", help="Sequences per micro-batch per process.")
SEQ = typer.Option(128, "--seq", help="Sequence length in tokens.")
ACCUM = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step.")
STEPS = typer.Option(5, "--steps", help="Timed optimizer steps.")
WARM = typer.Option(2, "--warmup", help="Untimed steps first (the first is reported as first-step time).")
NPROC = typer.Option(1, "--nproc", help="Processes on this node (torchrun; gloo on CPU, NCCL on CUDA).")
NNODES = typer.Option(1, "--nnodes", help="Nodes (with --rdzv-endpoint).")
RDZV = typer.Option(None, "--rdzv-endpoint", help="host:port of the rendezvous for several nodes.")
COMPILE = typer.Option(False, "--compile", help="torch.compile the model.")
DATA = typer.Option(None, "--data", help="Local JSONL of texts (default: synthetic tokens, fixed seed).")
TOK = typer.Option(None, "--tokenizer", help="Local tokenizer for --data (default: BPE trained on the data).")
SEED = typer.Option(0, "--seed")
DEVICE = typer.Option("auto", "--device", help="auto | cpu | cuda.")
LR = typer.Option(1e-3, "--lr")
TIMEOUT = typer.Option(1800.0, "--timeout", help="Seconds before the run is killed and recorded as timeout.")
MAXMEM = typer.Option(None, "--max-memory", help="Address-space limit per process (e.g. 4G); exceeding it records oom.")
THREADS = typer.Option(None, "--threads", help="Threads per process (default: usable cores / processes).")
USD = typer.Option(None, "--usd-per-hour", help="Price of the devices the run uses, USD/hour: the record states USD "
                   "per million training tokens (default: the hardware catalogue's price, where it has one).")


def pretrain(model: str = M, engine: Optional[str] = ENGINE, zero: int = ZERO, offload: str = OFFLOAD,
             recompute: str = RECOMPUTE, attn: str = ATTN, dtype: str = DTYPE, optimizer: str = OPT,
             micro_batch: int = MB, seq: int = SEQ, grad_accum: int = ACCUM, steps: int = STEPS, warmup: int = WARM,
             nproc: int = NPROC, nnodes: int = NNODES, rdzv_endpoint: Optional[str] = RDZV,
             compile_: bool = COMPILE, data: Optional[str] = DATA, tokenizer: Optional[str] = TOK, seed: int = SEED,
             device: str = DEVICE, lr: float = LR, timeout: float = TIMEOUT, max_memory: Optional[str] = MAXMEM,
             threads: Optional[int] = THREADS, usd_per_hour: Optional[float] = USD,
             ds_config: Optional[str] = DSCONF, tp: int = TP, ep: int = EP, db: DbPath = DbOpt,
             json_out: bool = JsonOpt) -> None:
    """Measure pre-training steps of a Llama-family model (random weights) on this machine."""
    _run(mn.PRETRAIN, locals())


def finetune(model: str = M, method: str = typer.Option("lora", "--method", help="full | lora | qlora (NF4 base)."),
             lora_rank: int = typer.Option(8, "--lora-rank"), lora_alpha: int = typer.Option(16, "--lora-alpha"),
             lora_targets: str = typer.Option("q_proj,k_proj,v_proj,o_proj", "--lora-targets",
                                              help="Modules with adapters; `experts`: a MoE model's routed experts."),
             engine: Optional[str] = ENGINE, zero: int = ZERO, offload: str = OFFLOAD,
             recompute: str = RECOMPUTE, attn: str = ATTN, dtype: str = DTYPE, optimizer: str = OPT,
             micro_batch: int = MB, seq: int = SEQ, grad_accum: int = ACCUM, steps: int = STEPS, warmup: int = WARM,
             nproc: int = NPROC, nnodes: int = NNODES, rdzv_endpoint: Optional[str] = RDZV,
             compile_: bool = COMPILE, data: Optional[str] = DATA, tokenizer: Optional[str] = TOK, seed: int = SEED,
             device: str = DEVICE, lr: float = LR, timeout: float = TIMEOUT, max_memory: Optional[str] = MAXMEM,
             threads: Optional[int] = THREADS, usd_per_hour: Optional[float] = USD,
             ds_config: Optional[str] = DSCONF, tp: int = TP, ep: int = EP, db: DbPath = DbOpt,
             json_out: bool = JsonOpt) -> None:
    """Measure fine-tuning steps: full, LoRA or QLoRA (bitsandbytes NF4 + PEFT)."""
    _run(mn.FINETUNE, locals())


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("pretrain")(pretrain)
    bench_app.command("finetune")(finetune)
