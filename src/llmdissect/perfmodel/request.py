"""What `estimate` is asked, as one typed request, and the function that answers it.

`EstimateRequest` holds the options of `llmdissect estimate pretrain|finetune|infer|serve`
(the CLI's options, a suite's `estimate` entries and `llmdissect.estimate(...)` all build one);
`run_estimate(request)` resolves the model and platform, reads the calibration profile and
runs the analytical model (a `serve` request is simulated by analysis.serve_estimate, which
needs the load generator's arrivals and metrics). No torch, no measurement.
"""
from __future__ import annotations

import os
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

import llmdissect.metric_names as mn
from llmdissect.errors import UserError

KINDS = (mn.PRETRAIN, mn.FINETUNE, mn.INFER, mn.SERVE)
ANALYTICAL_KINDS = (mn.PRETRAIN, mn.FINETUNE, mn.INFER)
"""What run_estimate answers with the closed-form model (a suite's `estimate` entries)."""
TRAIN_ONLY = ("micro_batch", "seq", "grad_accum", "zero", "offload", "recompute", "pp_virtual",
              "pp_flushes", "cp", "ep", "lora_rank", "lora_dropout", "optimizer", "precision", "engine",
              "loss", "float8", "kernels", "sp", "async_tp", "prefetch", "head",
              "held_logits")
INFER_ONLY = ("batch", "cache")
WEIGHTS = ("group_size", "kv_dtype")
"""Options of the served weights and cache: inference and serving take them, training does not."""
LENGTHS = ("input_len", "output_len")
SERVE_ONLY = ("profile", "max_num_seqs", "max_batched_tokens", "block_size", "num_blocks", "prefix_caching",
              "replicas", "num_prompts", "request_rate", "burstiness", "max_concurrency", "arrivals", "seed", "slo",
              "trace", "trace_format", "time_scale", "trace_block_tokens")
NOT_FOR = {mn.PRETRAIN: INFER_ONLY + WEIGHTS + LENGTHS + SERVE_ONLY,
           mn.FINETUNE: INFER_ONLY + WEIGHTS + LENGTHS + SERVE_ONLY,
           mn.INFER: TRAIN_ONLY + SERVE_ONLY, mn.SERVE: TRAIN_ONLY + INFER_ONLY + ("pp", "accumulate")}
"""The options each kind refuses (one line, exit 2)."""
POSITIVE = ("gpus", "tp", "pp", "pp_virtual", "pp_flushes", "cp", "ep", "micro_batch", "seq", "grad_accum", "batch",
            "input_len", "output_len", "group_size", "max_num_seqs", "max_batched_tokens", "block_size", "num_blocks",
            "replicas", "num_prompts", "max_concurrency", "trace_block_tokens")


class EstimateRequest(BaseModel):
    """One configuration to estimate. Unset (None) options take the defaults shown in brackets."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["pretrain", "finetune", "infer", "serve"]
    """What is estimated: a pre-training step, a fine-tuning step, offline inference, or a
    serving load (simulated iteration by iteration)."""
    model: str
    """Model preset, model TOML, or config.json."""
    hardware: str
    """A device (a800, h100, cpu) or a platform (8xa800)."""
    gpus: Optional[int] = None
    """Number of devices [the platform's]."""
    dtype: Optional[str] = None
    """fp32 | bf16 | fp16 [bf16 on GPUs, fp32 on CPU]."""
    micro_batch: Optional[int] = None
    """Sequences per micro-batch per device [1] (training)."""
    seq: Optional[int] = None
    """Training sequence length [2048, or the model's maximum when shorter]."""
    grad_accum: Optional[int] = None
    """Micro-batches per optimizer step [1] (training)."""
    zero: Optional[int] = None
    """ZeRO stage 0..3 [0] (training)."""
    offload: Optional[str] = None
    """none | optimizer | params [none] (training)."""
    recompute: Optional[str] = None
    """none | selective | full | op [none] (training)."""
    attn: str = "sdpa"
    """eager | sdpa | flash | flash3 (FlashAttention-3, Hopper GPUs: its own rate; estimate only)."""
    tp: int = 1
    """Tensor-parallel degree."""
    pp: Optional[int] = None
    """Pipeline-parallel degree [1] (training)."""
    pp_virtual: Optional[int] = None
    """Model chunks on each pipeline device [1] (training): > 1 is Megatron-LM's interleaved 1F1B,
    whose bubble is (pp - 1) / pp_virtual micro-batches; pp x pp_virtual must divide the layers."""
    pp_flushes: Optional[int] = None
    """Pipeline flushes a step [1] (training): its micro-batches run as this many pipelines, each
    with its own bubble; it must divide --grad-accum."""
    cp: Optional[int] = None
    """Context-parallel degree [1] (training): each sequence split over cp devices, the attention's
    keys and values passed around their ring; --seq must split into 2 x cp chunks."""
    ep: Optional[int] = None
    """Expert-parallel degree [1] (training, MoE models): the routed experts split over ep of
    the data-parallel ranks; it must divide the experts and the data-parallel degree."""
    optimizer: Optional[str] = None
    """adamw | adamw-fused | adamw-8bit | adam | sgd [adamw] (training)."""
    precision: Optional[str] = None
    """mixed | pure [mixed] (training): pure 16-bit keeps no fp32 master weights and the
    optimizer states in the compute dtype, as torchtune's dtype=bf16 recipes train."""
    engine: Optional[str] = None
    """single | ddp | fsdp | deepspeed [auto: as bench pretrain picks] (training)."""
    loss: Optional[str] = None
    """unchunked | chunked | fused [unchunked] (training): transformers' loss over the whole
    fp32 logits; torchtune's chunked output loss (8 chunks); a fused linear cross-entropy
    (Liger-Kernel's) that keeps no logits."""
    accumulate: Optional[str] = None
    """fp32 | fp16 [fp32] (training, infer): fp16 products accumulating in fp16 on a GPU
    (torch.backends.cuda.matmul.allow_fp16_accumulation), at a GeForce part's doubled peak."""
    kernels: Optional[str] = None
    """eager | fused [eager] (training): the layers' element-wise modules operator by operator,
    as transformers' and torchtitan's PyTorch modules run, or one pass each, as torch.compile,
    Megatron's and Transformer Engine's fused kernels run them."""
    head: Optional[str] = None
    """parallel | gathered | replicated [parallel] (training, with tp > 1): the output head and
    loss sharded over the vocabulary (Megatron's vocab-parallel cross-entropy, torchtitan's
    loss_parallel), the head's product sharded and its fp32 logits all-gathered for a whole loss
    on every rank (NeMo AutoModel), or both whole on every rank (bench's TP plan)."""
    held_logits: Optional[str] = None
    """none | compute | fp32 [none] (training): the logits a loop that keeps the model output
    holds through backward, in the compute dtype (transformers 4.45 and later) or upcast to
    fp32 in the forward (transformers 4.31-4.44); none where the loop keeps only the loss."""
    sp: Optional[bool] = None
    """Sequence parallelism with tp > 1 [off] (training): the norms and residual adds on 1/tp of
    the tokens, each TP all-reduce an all-gather and a reduce-scatter (Megatron-LM's
    sequence_parallel, torchtitan's and NeMo AutoModel's)."""
    async_tp: Optional[bool] = None
    """With sp [off] (training): the TP collectives overlapped with the products they feed and
    follow (torch's async TP, enable_async_tensor_parallel)."""
    prefetch: Optional[bool] = None
    """With zero 3 [off] (training): each unit's parameter all-gather issued while the unit before
    computes (FSDP2's explicit prefetching, NeMo AutoModel's enable_fsdp2_prefetch)."""
    float8: Optional[str] = None
    """none | tensorwise [none] (training): the layers' linears in float8, as torchao's
    Float8Linear with dynamic tensor-wise scales (torchtitan's float8 converter), on a GPU with
    an FP8 peak."""
    lora_rank: Optional[int] = None
    """LoRA rank (finetune; 0 = full fine-tuning)."""
    lora_targets: Optional[str] = None
    """Modules with adapters [q_proj,k_proj,v_proj,o_proj] or 'all' (finetune)."""
    lora_dropout: Optional[str] = None
    """none | input | output [none]: where the adapters' dropout acts (finetune)."""
    quant: str = "none"
    """none | int8 | int8-bnb | nf4 | ...: the QLoRA base, or the inference weights."""
    group_size: Optional[int] = None
    """int4-weight's group size: 32 | 64 | 128 | 256 [128, torchao's] (infer, serve)."""
    kv_dtype: Optional[str] = None
    """auto | fp8: the KV cache's elements [auto: the compute dtype] (infer, serve; fp8 on GPUs:
    vLLM's --kv-cache-dtype fp8, TensorRT-LLM's FP8 KV cache)."""
    batch: Optional[int] = None
    """Sequences per batch [1] (infer)."""
    input_len: Optional[int] = None
    """Prompt tokens [512 infer, 128 serve]."""
    output_len: Optional[int] = None
    """Generated tokens [128] (infer, serve)."""
    cache: Optional[str] = None
    """dynamic | static: the KV cache of generate [dynamic] (infer; dynamic rewrites itself each step)."""
    profile: Optional[str] = None
    """The serving engine's scheduler: vllm | vllm-large | sglang | transformers [vllm on GPUs,
    transformers on CPU] (serve)."""
    max_num_seqs: Optional[int] = None
    """Sequences running at once [the profile's; 0: as many as the KV cache holds] (serve)."""
    max_batched_tokens: Optional[int] = None
    """Tokens per iteration [the profile's] (serve)."""
    block_size: Optional[int] = None
    """Tokens per KV-cache block [the profile's] (serve)."""
    num_blocks: Optional[int] = None
    """KV-cache blocks [the profile's, or what the memory holds] (serve)."""
    prefix_caching: Optional[bool] = None
    """Reuse the cached blocks of shared prefixes [the profile's] (serve)."""
    replicas: Optional[int] = None
    """Engine replicas, each on gpus / replicas devices with --tp, requests dealt round-robin [1] (serve)."""
    num_prompts: Optional[int] = None
    """Requests [100] (serve)."""
    request_rate: Optional[float] = None
    """Requests per second, Poisson (gamma with --burstiness); inf: all at once [inf] (serve)."""
    burstiness: Optional[float] = None
    """Gamma shape of the gaps between requests [1: Poisson] (serve)."""
    max_concurrency: Optional[int] = None
    """At most this many requests in flight, a closed loop [no limit] (serve)."""
    arrivals: Optional[str] = None
    """Replay send offsets from a JSON file or a stored record (serve)."""
    seed: Optional[int] = None
    """Seed of the arrivals [0] (serve)."""
    slo: Optional[str] = None
    """Service-level objectives for goodput, e.g. ttft=0.5,tpot=0.05 (serve)."""
    trace: Optional[str] = None
    """Replay a trace file (Mooncake JSONL, Azure or BurstGPT CSV): its arrival times, lengths
    and, for Mooncake, shared prompt blocks, as `bench serve --trace` sends them (serve)."""
    trace_format: Optional[str] = None
    """auto | mooncake | azure | burstgpt [auto] (serve)."""
    time_scale: Optional[float] = None
    """Multiply the trace's gaps by this [1] (serve)."""
    trace_block_tokens: Optional[int] = None
    """Prompt tokens per Mooncake hash id [512] (serve)."""


def estimate_request(kind: str, **options: Any) -> EstimateRequest:
    """A checked request from keyword options (None values mean unset); UserError on bad input."""
    from llmdissect.config import parse_config

    if kind not in KINDS:
        raise UserError(f"unknown estimate kind {kind!r}; choose one of {', '.join(KINDS)}")
    given = [k for k in NOT_FOR[kind] if options.get(k) is not None]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} does not apply to `estimate {kind}`")
    for key in POSITIVE:
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise UserError(f"--{key.replace('_', '-')} must be a positive integer, got {value}")
    values = {k: v for k, v in options.items() if v is not None}
    return parse_config(EstimateRequest, kind=kind, **values)


def run_estimate(request: EstimateRequest, calibration: str | os.PathLike | None = None):
    """The Estimate of `request` on its platform, with this machine's calibration profile
    (or `calibration`, which must then exist). Raises UserError on bad input."""
    from llmdissect.calibration_profile import load_profile
    from llmdissect.specs import get_model

    profile = load_profile(calibration, required=calibration is not None)
    return estimate_for(request, get_model(request.model), profile, explicit=calibration is not None)


def estimate_for(request: EstimateRequest, model, profile: dict[str, Any], explicit: bool = False):
    """The Estimate of `request` for the ModelSpec `model` under calibration `profile` ({}:
    the hardware catalogue's figures alone, as `validate --published` asks)."""
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.perfmodel.config import InferSetup, TrainSetup
    from llmdissect.perfmodel.estimate import estimate_infer, estimate_train
    from llmdissect.perfmodel.weights import LORA_TARGETS_DEFAULT, parse_lora_targets
    from llmdissect.specs import resolve_platform

    r = request
    if r.kind == mn.SERVE:
        raise UserError("a serve estimate is a simulation: analysis.serve_estimate.run_serve_estimate runs it")
    platform = resolve_platform(r.hardware, r.gpus)
    dtype = r.dtype or ("fp32" if platform.device.kind == "cpu" else "bf16")
    machine = machine_for(platform, dtype, profile, explicit=explicit)
    common = dict(model=model, platform=platform, dtype=dtype, attn=r.attn, quant=r.quant, tp=r.tp)
    if r.kind == mn.INFER:
        setup = InferSetup(batch=r.batch or 1, input_len=r.input_len or 512, output_len=r.output_len or 128,
                           cache=r.cache or "dynamic", group_size=r.group_size or 0,
                           kv_dtype=r.kv_dtype or "auto", pp=r.pp or 1, accumulate=r.accumulate or "fp32",
                           **common)
        return estimate_infer(setup, machine)
    targets = parse_lora_targets(r.lora_targets) if r.lora_targets else LORA_TARGETS_DEFAULT
    setup = TrainSetup(kind=r.kind, micro_batch=r.micro_batch or 1,
                       seq=r.seq or min(2048, model.max_position_embeddings), grad_accum=r.grad_accum or 1,
                       zero=r.zero if r.zero is not None else 0, offload=r.offload or "none",
                       recompute=r.recompute or "none", pp=r.pp or 1,
                       pp_virtual=r.pp_virtual or 1, pp_flushes=r.pp_flushes or 1, cp=r.cp or 1, ep=r.ep or 1,
                       optimizer=r.optimizer or "adamw",
                       lora_rank=r.lora_rank or 0, lora_targets=targets, lora_dropout=r.lora_dropout or "none",
                       engine_name=r.engine or "auto",
                       precision=r.precision or "mixed", loss=r.loss or "unchunked",
                       float8=r.float8 or "none", kernels=r.kernels or "eager", sp=bool(r.sp),
                       head=r.head or "parallel", held_logits=r.held_logits or "none",
                       async_tp=bool(r.async_tp), prefetch=bool(r.prefetch),
                       accumulate=r.accumulate or "fp32", **common)
    return estimate_train(setup, machine)


def build_estimate(kind: str, options: dict[str, Any], calibration: str | os.PathLike | None = None):
    """`run_estimate(estimate_request(kind, **options))`: the Estimate of keyword options."""
    return run_estimate(estimate_request(kind, **options), calibration)


def estimate_env(calibration: str | os.PathLike | None = None) -> dict[str, Any]:
    """What an estimate's record carries: no measurement happened, so no library versions."""
    import platform
    import sys

    from llmdissect.version import __version__

    return {"llmdissect": __version__, "python": platform.python_version(), "hostname": platform.node(),
            "command": " ".join(sys.argv), "calibration": str(calibration) if calibration else None}
