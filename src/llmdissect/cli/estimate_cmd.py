"""`llmdissect estimate pretrain|finetune|infer|serve`: predict memory, time and throughput.

No torch, no measurement: the analytical model of `llmdissect.perfmodel`, fed by the specs
and this machine's calibration profile; a serving load is simulated iteration by iteration
on it (analysis.serve_estimate). The record (source: estimated) is stored too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt
from llmdissect.console import console, human_bytes, human_count, human_rate, human_seconds, print_json, table


def estimate(
    kind: str = typer.Argument(..., help="pretrain | finetune | infer | serve"),
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
    attn: str = typer.Option("sdpa", "--attn", help="eager | sdpa | flash | flash3 (FlashAttention-3: Hopper "
                             "GPUs, its own rate)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree [1]."),
    pp_virtual: Optional[int] = typer.Option(None, "--pp-virtual", help="Model chunks on each pipeline device: "
                                             "> 1 is Megatron-LM's interleaved 1F1B (training) [1]."),
    pp_flushes: Optional[int] = typer.Option(None, "--pp-flushes", help="Pipeline flushes a step, each with its "
                                             "own bubble; divides --grad-accum (training) [1]."),
    cp: Optional[int] = typer.Option(None, "--cp", help="Context-parallel degree (training): each sequence split "
                                     "over cp devices, its attention a ring [1]."),
    ep: Optional[int] = typer.Option(None, "--ep", help="Expert-parallel degree (training, MoE models): the routed "
                                     "experts split over ep data-parallel ranks [1]."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer",
                                            help="adamw | adamw-fused | adamw-8bit | adam | sgd [adamw]."),
    precision: Optional[str] = typer.Option(None, "--precision", help="mixed | pure: pure 16-bit keeps no fp32 "
                                            "master weights, optimizer states in the dtype (training) [mixed]."),
    loss: Optional[str] = typer.Option(None, "--loss", help="unchunked | chunked | fused: transformers' loss over "
                                       "the whole logits, torchtune's 8 chunks, or a fused linear cross-entropy "
                                       "that keeps no logits (training) [unchunked]."),
    accumulate: Optional[str] = typer.Option(None, "--accumulate", help="fp32 | fp16: fp16 products accumulating "
                                             "in fp16, a GeForce GPU's doubled peak (training, infer; --dtype fp16) "
                                             "[fp32]."),
    kernels: Optional[str] = typer.Option(None, "--kernels", help="eager | fused: the layers' element-wise "
                                          "modules operator by operator (PyTorch eager, as bench runs them) or "
                                          "one pass each (torch.compile, fused kernels) (training) [eager]."),
    float8: Optional[str] = typer.Option(None, "--float8", help="none | tensorwise: the layers' linears in "
                                         "float8, as torchao's Float8Linear (training, GPUs with an FP8 peak) "
                                         "[none]."),
    head: Optional[str] = typer.Option(None, "--head", help="parallel | gathered | replicated: under --tp the "
                                       "head and loss sharded over the vocabulary (Megatron, torchtitan), its logits "
                                       "gathered for a whole loss (NeMo AutoModel), or whole on every rank (bench) "
                                       "(training) [parallel]."),
    held_logits: Optional[str] = typer.Option(None, "--held-logits", help="none | compute | fp32: the logits a "
                                              "loop that keeps the model output holds through backward, in the "
                                              "compute dtype (transformers >= 4.45) or fp32 (4.31-4.44 upcast them "
                                              "in the forward) (training) [none: the loop keeps only the loss]."),
    sp: Optional[bool] = typer.Option(None, "--sp/--no-sp", help="Sequence parallelism with --tp: norms and "
                                      "residuals on 1/tp of the tokens (training) [off]."),
    async_tp: Optional[bool] = typer.Option(None, "--async-tp/--no-async-tp", help="With --sp: the TP collectives "
                                            "overlapped with the products (torch's async TP) (training) [off]."),
    prefetch: Optional[bool] = typer.Option(None, "--prefetch/--no-prefetch", help="With --zero 3: each unit's "
                                            "parameter all-gather issued while the one before computes (FSDP2's "
                                            "explicit prefetch) (training) [off]."),
    engine: Optional[str] = typer.Option(None, "--engine", help="single | ddp | fsdp | deepspeed (training) "
                                                                "[as bench pretrain picks]."),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank", help="LoRA rank (finetune; 0 = full)."),
    lora_targets: Optional[str] = typer.Option(None, "--lora-targets", help="Modules with adapters "
                                               "[q_proj,k_proj,v_proj,o_proj], 'all', or 'experts' "
                                               "(a MoE model's routed experts)."),
    lora_dropout: Optional[str] = typer.Option(None, "--lora-dropout", help="none | input | output: where the "
                                               "adapters' dropout acts (finetune) [none]."),
    quant: str = typer.Option("none", "--quant", help="none | int8 | int8-bnb | nf4 | ... (QLoRA base, or "
                                                      "inference weights)."),
    group_size: Optional[int] = typer.Option(None, "--group-size", help="int4-weight's group size: 32 | 64 | 128 | "
                                             "256 (infer, serve) [128]."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="auto | fp8: the KV cache's elements (infer, "
                                           "serve; fp8 on GPUs, as vLLM's --kv-cache-dtype fp8) [auto]."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Sequences per batch (infer) [1]."),
    input_len: Optional[int] = typer.Option(None, "--input-len", help="Prompt tokens [512 infer, 128 serve]."),
    output_len: Optional[int] = typer.Option(None, "--output-len", help="Generated tokens (infer, serve) [128]."),
    cache: Optional[str] = typer.Option(None, "--cache", help="dynamic | static: generate's KV cache (infer) "
                                                              "[dynamic]."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Serving scheduler: vllm | vllm-large | sglang | "
                                          "transformers (serve) [vllm on GPUs, transformers on CPU]."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="Running sequences at most "
                                               "(serve) [the profile's]."),
    max_batched_tokens: Optional[int] = typer.Option(None, "--max-batched-tokens", help="Tokens per iteration "
                                                     "(serve) [the profile's]."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="Tokens per KV block (serve) [the profile's]."),
    num_blocks: Optional[int] = typer.Option(None, "--num-blocks", help="KV blocks (serve) [the profile's, or what "
                                             "the memory holds]."),
    prefix_caching: Optional[bool] = typer.Option(None, "--prefix-caching/--no-prefix-caching",
                                                  help="Reuse cached shared prefixes (serve) [the profile's]."),
    replicas: Optional[int] = typer.Option(None, "--replicas", help="Engine replicas over the devices (serve) [1]."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="Requests (serve) [100]."),
    request_rate: Optional[float] = typer.Option(None, "--request-rate", help="Requests/s, Poisson; inf: all at "
                                                 "once (serve) [inf]."),
    burstiness: Optional[float] = typer.Option(None, "--burstiness", help="Gamma shape of the gaps (serve) [1]."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="Requests in flight at most "
                                                  "(serve) [no limit]."),
    arrivals: Optional[str] = typer.Option(None, "--arrivals", help="Replay send offsets from a JSON file or a "
                                           "stored record (serve)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the arrivals (serve) [0]."),
    slo: Optional[str] = typer.Option(None, "--slo", help="SLOs for goodput, e.g. ttft=0.5,tpot=0.05 (serve)."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Replay a trace (Mooncake JSONL, Azure or BurstGPT "
                                        "CSV): its times, lengths and shared blocks (serve)."),
    trace_format: Optional[str] = typer.Option(None, "--trace-format", help="auto | mooncake | azure | burstgpt "
                                               "(serve) [auto]."),
    time_scale: Optional[float] = typer.Option(None, "--time-scale", help="Multiply the trace's gaps by this "
                                               "(serve) [1]."),
    trace_block_tokens: Optional[int] = typer.Option(None, "--trace-block-tokens", help="Prompt tokens per "
                                                     "Mooncake hash id (serve) [512]."),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="Calibration profile (default: this machine's)."),
    store: bool = typer.Option(True, "--store/--no-store", help="Store the estimate in the results database."),
    db: DbPath = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Predict per-device memory, step time, throughput and MFU of a configuration, or the
    latencies and throughput of a serving load (no run)."""
    opts = {k: v for k, v in locals().items() if k not in ("kind", "calibration", "store", "db", "json_out")}
    from llmdissect.perfmodel.request import estimate_env, estimate_request, run_estimate

    request = estimate_request(kind, **opts)
    if request.kind == "serve":
        from llmdissect.analysis.serve_estimate import run_serve_estimate

        est = run_serve_estimate(request, calibration)
    else:
        est = run_estimate(request, calibration)
    record = est.to_record(estimate_env(calibration))
    if store:
        from llmdissect.results.store import open_store  # not results.recording: it imports the launcher

        with open_store(db) as s:
            s.add(record)
    if json_out:
        print_json(record.to_dict())
        return
    (show_serve_estimate if request.kind == "serve" else show_estimate)(est, record.id if store else None)


def show_serve_estimate(est, record_id: str | None) -> None:
    m, c, eng = est.metrics, est.config, est.metrics["engine"]
    console.print(f"Estimate: serve {c['model']} on {c['hardware']} ({c['dtype']}, tp {c['tp']}, "
                  f"{c['replicas']} replica(s), scheduler {c['profile']['name']}): {c['num_prompts']} requests of "
                  + (f"{c['input_len']} + {c['output_len']} tokens on average from the {c['trace_format_read']} "
                     f"trace {c['trace']} (times x {c['time_scale']:g})" if c.get("trace") else
                     f"{c['input_len']} + {c['output_len']} tokens at {c['request_rate']}/s"), markup=False)
    rows = [(key, *((human_seconds(s[q]) for q in ("mean", "median", "p90", "p99")) if (s := m.get(key)) else "-"))
            for key in (mn.TTFT_S, mn.TPOT_S, mn.ITL_S, mn.E2E_LATENCY_S)]
    console.print(table(None, ["metric", "mean", "median", "p90", "p99"], rows))
    good = f", goodput {m[mn.GOODPUT_PER_S]:.3g} req/s" if m.get(mn.GOODPUT_PER_S) is not None else ""
    console.print(f"{m['completed']} requests in {m[mn.DURATION_S]:.2f} s: {m[mn.REQUEST_THROUGHPUT_PER_S]:.3g} req/s, "
                  f"{human_rate(m[mn.OUTPUT_TOKENS_PER_S], 'output tok/s')}{good}")
    console.print(f"engine: {eng['iterations']} iterations, mean batch {eng['mean_batch_size']:.1f}, KV cache "
                  f"{eng['kv_cache_use_mean']:.0%} used on average ({eng['kv_cache_use_max']:.0%} at most) of "
                  f"{eng['kv_blocks']} blocks, {eng['preemptions']} preemption(s), "
                  f"{eng['prefix_hit_tokens']} prompt tokens from the prefix cache")
    for n in est.notes:
        console.print(f"  - {n}", markup=False)
    if record_id:
        console.print(f"stored as {record_id} (source: estimated)")


MEMORY_ROWS = (mn.PARAMS_BYTES, mn.GRADS_BYTES, mn.OPTIMIZER_BYTES, mn.ACTIVATIONS_BYTES, mn.KV_CACHE_BYTES,
               "step_peak_bytes", mn.OTHER_BYTES, mn.TOTAL_BYTES, "host_total_bytes")


def show_estimate(est, record_id: str | None) -> None:
    m, c = est.metrics, est.config
    title = (f"Estimate: {est.kind} {c['model']} on {c['hardware']} ({c['dtype']}"
             + (f", ZeRO-{c['zero']}, offload {c['offload']}, recompute {c['recompute']}" if "zero" in c else "")
             + f", attn {c['attn']}, tp {c['tp']}" + (f", pp {c['pp']}" if "pp" in c else "")
             + (f" x {c['pp_virtual']} chunks (interleaved)" if "pp_virtual" in c else "")
             + (f", {c['pp_flushes']} flushes" if "pp_flushes" in c else "")
             + (f", cp {c['cp']}" if "cp" in c else "") + ")")
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
