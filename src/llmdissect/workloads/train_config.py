"""Typed configuration of a measured training run, validated before anything is launched.

Validation imports no torch and touches neither the environment nor the network, so bad
input fails in milliseconds with one clear line (UserError), before a child is started.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field

from llmdissect.errors import UserError
from llmdissect.perfmodel.config import ENGINE_ZERO
from llmdissect.perfmodel.weights import resolve_lora_targets
from llmdissect.specs.models import ModelSpec, get_model

Engine = Literal["single", "ddp", "fsdp", "deepspeed"]


class TrainConfig(BaseModel):
    """One training benchmark (pre-training or fine-tuning)."""

    kind: Literal["pretrain", "finetune"] = "pretrain"
    """Which benchmark: pre-training or fine-tuning (the subcommand)."""
    model: str = "tiny-llama"
    """Preset name, model TOML, config.json or model folder."""
    engine: Optional[Engine] = None
    """single | ddp | fsdp | deepspeed; None picks from --zero and --nproc."""
    zero: int = Field(0, ge=0, le=3)
    """0: DDP; 1: DDP + ZeroRedundancyOptimizer; 2/3: FSDP2 without/with resharding after forward."""
    offload: Literal["none", "optimizer", "params"] = "none"
    """none | params (FSDP2 CPUOffloadPolicy; deepspeed ZeRO-3) | optimizer (deepspeed)."""
    recompute: Literal["none", "selective", "full", "op"] = "none"
    """selective: each attention block recomputed; full: each decoder layer recomputed; op:
    torchtitan's per-operator policy (every other matmul's output and the attention's saved)."""
    attn: Literal["eager", "sdpa", "flash"] = "sdpa"
    """eager | sdpa | flash (CUDA with flash-attn only)."""
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    """fp32 | bf16 | fp16 (autocast / FSDP mixed precision)."""
    optimizer: Literal["adamw", "adamw-fused", "adamw-8bit"] = "adamw"
    """adamw | adamw-fused | adamw-8bit (bitsandbytes)."""
    lr: float = Field(1e-3, gt=0)
    """Learning rate."""
    micro_batch: int = Field(1, ge=1)
    """Sequences per micro-batch per process."""
    seq: int = Field(128, ge=2)
    """Sequence length in tokens."""
    grad_accum: int = Field(1, ge=1)
    """Micro-batches per optimizer step."""
    steps: int = Field(5, ge=1)
    """Timed optimizer steps."""
    warmup: int = Field(2, ge=0)
    """Untimed steps before them (the first is reported as first-step time)."""
    nproc: int = Field(1, ge=1)
    """Processes on this node (torchrun; gloo on CPU, NCCL on CUDA)."""
    nnodes: int = Field(1, ge=1)
    """Nodes (with rdzv_endpoint)."""
    rdzv_endpoint: Optional[str] = None
    """host:port of the rendezvous for several nodes."""
    compile: bool = False
    """torch.compile the model."""
    method: Literal["full", "lora", "qlora"] = "full"
    """full | lora | qlora (NF4 base): which weights are trained."""
    lora_rank: int = Field(8, ge=1)
    """LoRA rank (method lora or qlora)."""
    lora_alpha: int = Field(16, ge=1)
    """LoRA scaling alpha."""
    lora_targets: str = "q_proj,k_proj,v_proj,o_proj"
    """Comma-separated modules that get adapters."""
    data: Optional[str] = None
    """A local JSONL file of {"text": ...} lines; synthetic tokens when absent."""
    tokenizer: Optional[str] = None
    """A local tokenizer folder or tokenizer.json for --data (trained on the data when absent)."""
    seed: int = 0
    """Seed of the random weights and the synthetic tokens."""
    device: str = "auto"
    """auto (cuda when available, else cpu), cpu or cuda."""
    ds_config: Optional[str] = None
    """--engine deepspeed: a DeepSpeed JSON config merged with what the options require."""
    tp: int = Field(1, ge=1)
    """Tensor-parallel size (DTensor, Megatron-style); nproc x nnodes = tp x dp."""
    ep: int = Field(1, ge=1)
    """Expert-parallel size (MoE models): the routed experts split over groups of ep data-parallel ranks."""

    model_config = {"extra": "forbid"}

    def spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def resolve_engine(cfg: TrainConfig) -> TrainConfig:
    """Fill in the engine from --zero / --nproc, and reject combinations that cannot run."""
    engine = cfg.engine
    if engine is None:
        engine = "fsdp" if cfg.zero >= 2 else ("ddp" if cfg.zero == 1 or cfg.world_size > 1 else "single")
    if cfg.zero not in ENGINE_ZERO[engine]:
        hint = {"ddp": "use --engine fsdp for ZeRO-2/3", "fsdp": "use --engine ddp for ZeRO-0/1",
                "single": "ZeRO needs a data-parallel engine: --engine ddp or fsdp"}[engine]
        raise UserError(f"--zero {cfg.zero} does not run on --engine {engine}: {hint}")
    if engine == "single" and cfg.world_size > 1:
        raise UserError(f"--engine single runs one process; use --engine ddp or fsdp for --nproc {cfg.nproc}")
    if cfg.offload != "none" and engine not in ("fsdp", "deepspeed"):
        raise UserError(f"--offload {cfg.offload} needs --engine fsdp (ZeRO-2/3) or deepspeed")
    if cfg.offload == "optimizer" and engine == "fsdp":
        raise UserError("FSDP2 offloads parameters, gradients and optimizer state together: use --offload params "
                        "(or --engine deepspeed for optimizer-only offload)")
    if cfg.method != "full" and engine in ("fsdp", "deepspeed"):
        raise UserError(f"--method {cfg.method} runs on --engine single or ddp")
    return cfg.model_copy(update={"engine": engine})


def validate(cfg: TrainConfig) -> TrainConfig:
    """Every check that needs no torch: shapes, combinations, optional packages, files."""
    spec = cfg.spec()
    if cfg.seq > spec.max_position_embeddings:
        raise UserError(f"--seq {cfg.seq} is longer than {spec.name} allows ({spec.max_position_embeddings})")
    if cfg.tp > 1:
        from llmdissect.engines.tensor_parallel import check_tp

        cfg = cfg.model_copy(update={"engine": check_tp(cfg, spec.num_heads, spec.num_kv_heads,
                                                          spec.intermediate_size)})
    else:
        cfg = resolve_engine(cfg)
    if cfg.ep > 1:
        from llmdissect.engines.expert_parallel import check_ep

        check_ep(cfg, spec)
    if cfg.kind == "pretrain" and cfg.method != "full":
        raise UserError("LoRA and QLoRA are fine-tuning methods: use `bench finetune`")
    if cfg.method == "qlora" and importlib.util.find_spec("bitsandbytes") is None:
        raise UserError("--method qlora needs bitsandbytes, which is not installed (pip install bitsandbytes)")
    if cfg.optimizer == "adamw-8bit" and importlib.util.find_spec("bitsandbytes") is None:
        raise UserError("--optimizer adamw-8bit needs bitsandbytes, which is not installed")
    if cfg.method == "qlora" and cfg.dtype == "fp16":
        raise UserError("--method qlora computes in fp32 or bf16 here; fp16 is not supported")
    if cfg.engine == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise UserError("--engine deepspeed needs the deepspeed package, which is not installed")
    if cfg.engine == "deepspeed":
        from llmdissect.engines.deepspeed_config import validate_deepspeed

        validate_deepspeed(cfg, cfg.world_size)
    elif cfg.ds_config is not None:
        raise UserError("--ds-config is a DeepSpeed config: it needs --engine deepspeed")
    if cfg.data is not None and not Path(cfg.data).is_file():
        raise UserError(f"--data file not found: {cfg.data}")
    if cfg.tokenizer is not None and not Path(cfg.tokenizer).exists():
        raise UserError(f"--tokenizer not found: {cfg.tokenizer}")
    targets = [t for t in cfg.lora_targets.split(",") if t]
    if not targets:
        raise UserError("--lora-targets is empty; give module names such as q_proj,v_proj")
    # the same targets the estimate counts: MLA's projections by default, no MoE experts
    cfg = cfg.model_copy(update={"lora_targets": ",".join(resolve_lora_targets(spec, tuple(targets)))})
    from llmdissect.measure.devices import resolve_device

    device = resolve_device(cfg.device).torch_device
    if cfg.attn == "flash" and device != "cuda":
        raise UserError("--attn flash needs a CUDA GPU with the flash-attn package; use sdpa on this device")
    return cfg.model_copy(update={"device": device})


def record_config(cfg: TrainConfig) -> dict:
    """The record's config: the shared keys of docs/developing.md plus this run's own."""
    d = cfg.model_dump(exclude={"kind", "rdzv_endpoint"})
    from llmdissect.measure.devices import hardware_name

    d["hardware"] = hardware_name(cfg.device)
    d.update(tp=cfg.tp, dp=cfg.world_size // cfg.tp, pp=1, quant="nf4" if cfg.method == "qlora" else "none")
    if cfg.engine == "deepspeed":
        from llmdissect.engines.deepspeed_config import effective_ds_config

        d["ds_config_file"], d["ds_config"] = cfg.ds_config, effective_ds_config(cfg, cfg.world_size)
    if cfg.method == "full":
        for key in ("lora_rank", "lora_alpha", "lora_targets"):
            d.pop(key)
    return d
