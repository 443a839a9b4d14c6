"""What an estimate is asked: typed, validated setups (one clear UserError per mistake)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.dtypes import check_compute_dtype, dtype_bytes
from llmdissect.errors import UserError
from llmdissect.perfmodel.activations import ATTNS, HELD_LOGITS, RECOMPUTES
from llmdissect.perfmodel.defaults import FLASH3_ARCHITECTURES, OPTIMIZERS
from llmdissect.perfmodel.kvcache import CACHES
from llmdissect.perfmodel.moe import check_expert_parallel
from llmdissect.perfmodel.op_costs import FLOAT8_RECIPES, HEADS, KERNELS, LORA_DROPOUTS, LOSSES
from llmdissect.perfmodel.states import OFFLOADS, PRECISIONS
from llmdissect.perfmodel.weights import LORA_TARGETS_DEFAULT, check_group_size, check_quant, group_size_key
from llmdissect.specs.hardware import Platform
from llmdissect.specs.models import ModelSpec


def _positive(**values: int) -> None:
    for name, v in values.items():
        if v is None or v <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")


KV_DTYPES = ("auto", "fp8")


def check_kv_dtype(kv_dtype: str, platform: Platform) -> str:
    """auto | fp8; an FP8 cache is a GPU serving engine's option (vLLM, TensorRT-LLM), which
    transformers' generate on a CPU does not have."""
    _choice("kv-dtype", kv_dtype, KV_DTYPES)
    if kv_dtype == "fp8" and platform.device.kind != "gpu":
        raise UserError("--kv-dtype fp8 is a GPU engine's KV cache (vLLM --kv-cache-dtype fp8, TensorRT-LLM); "
                        f"{platform.device.name} has none")
    return kv_dtype


def kv_element_bytes(kv_dtype: str, e: float) -> float:
    """Bytes of one cached key or value element: one for fp8, else the compute dtype's `e`."""
    return 1.0 if kv_dtype == "fp8" else e


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UserError(f"unknown --{name} {value!r}; choose one of {', '.join(choices)}")
    return value


def _check_parallel(m: ModelSpec, platform: Platform, tp: int, pp: int) -> int:
    """Validate TP/PP against the model and the platform; returns the data-parallel degree."""
    _positive(tp=tp, pp=pp)
    if m.num_heads % tp:
        raise UserError(f"--tp {tp} does not divide the {m.num_heads} attention heads of {m.name}")
    if m.num_kv_heads % tp and tp % m.num_kv_heads:
        raise UserError(f"--tp {tp} does not divide (nor is a multiple of) the {m.num_kv_heads} kv heads of {m.name}")
    if pp > m.num_layers:
        raise UserError(f"--pp {pp} is more pipeline stages than the {m.num_layers} layers of {m.name}")
    if platform.num_devices % (tp * pp):
        raise UserError(f"--tp {tp} x --pp {pp} = {tp * pp} does not divide the {platform.num_devices} devices "
                        f"of {platform.name}")
    return platform.num_devices // (tp * pp)


ENGINES = ("auto", "single", "ddp", "fsdp", "deepspeed")
ENGINE_ZERO = {"single": (0,), "ddp": (0, 1), "fsdp": (2, 3), "deepspeed": (0, 1, 2, 3)}
"""The ZeRO stages each engine runs (bench pretrain's workloads.train_config.resolve_engine
checks its runs against this same table)."""
DEEPSPEED_BUCKET_ELEMENTS = 5e8
"""DeepSpeed's default reduce_bucket_size / allgather_bucket_size, in elements (DeepSpeed
config docs, "ZeRO Optimizations": 5e8)."""


def _check_virtual_stages(m: ModelSpec, pp: int, virtual: int) -> None:
    """Megatron-LM's interleaved schedule splits each stage into `virtual` chunks of equal depth."""
    _positive(pp_virtual=virtual)
    if virtual > 1 and pp < 2:
        raise UserError(f"--pp-virtual {virtual} interleaves pipeline stages: give --pp 2 or more")
    if virtual > 1 and m.num_layers % (pp * virtual):
        raise UserError(f"--pp {pp} x --pp-virtual {virtual} = {pp * virtual} chunks do not divide the "
                        f"{m.num_layers} layers of {m.name}")


def _check_flushes(pp: int, flushes: int, grad_accum: int) -> None:
    _positive(pp_flushes=flushes)
    if flushes > 1 and pp < 2:
        raise UserError(f"--pp-flushes {flushes} splits a pipeline's step: give --pp 2 or more")
    if grad_accum % flushes:
        raise UserError(f"--pp-flushes {flushes} does not divide the step's {grad_accum} micro-batches (--grad-accum)")


def _check_context_parallel(cp: int, dp: int, seq: int, attn: str, tp: int, pp: int) -> int:
    """Validate context parallelism; returns the data-parallel degree left beside it. The
    sequence splits into 2 cp chunks, two a rank, so that causal attention's work is balanced
    (Megatron-Core: the sequence length must be divisible by 2 x cp)."""
    _positive(cp=cp)
    if cp == 1:
        return dp
    if dp % cp:
        raise UserError(f"--tp {tp} x --pp {pp} x --cp {cp} = {tp * pp * cp} does not divide the {dp * tp * pp} "
                        "devices")
    if seq % (2 * cp):
        raise UserError(f"--seq {seq} does not split into 2 x --cp {cp} = {2 * cp} equal chunks")
    if attn == "eager":
        raise UserError("--cp passes keys and values around a ring of fused attention kernels: "
                        "use --attn sdpa or flash")
    return dp // cp


def sharded_collective_calls(m: ModelSpec, fsdp, deepspeed, tp=1, pp=1):
    """Collectives per sharded pass: FSDP2 gathers and reduces each decoder layer on its own
    (engines/wrap.py wraps every layer, then the root); DeepSpeed fills buckets of
    DEEPSPEED_BUCKET_ELEMENTS and sends each; others one. `fsdp`, `deepspeed`: 0/1, scalars
    or numpy arrays (advise)."""
    buckets = -(-m.params / (tp * pp) // DEEPSPEED_BUCKET_ELEMENTS)  # ceil, for arrays too
    buckets = buckets + (1 - buckets) * (buckets < 1)
    return fsdp * (m.num_layers // pp + 1) + deepspeed * buckets + (1 - fsdp - deepspeed)


def _check_engine(engine: str, zero: int, offload: str, devices: int) -> None:
    _choice("engine", engine, ENGINES)
    if engine == "auto":
        return
    if zero not in ENGINE_ZERO[engine]:
        raise UserError(f"--zero {zero} does not run on --engine {engine} (it runs ZeRO "
                        f"{', '.join(map(str, ENGINE_ZERO[engine]))})")
    if engine == "single" and devices > 1:
        raise UserError(f"--engine single runs one process, not {devices}; use ddp, fsdp or deepspeed")
    if offload == "optimizer" and engine != "deepspeed":
        raise UserError("--offload optimizer runs on --engine deepspeed only")


ACCUMULATES = ("fp32", "fp16")


def check_accumulate(accumulate: str, dtype: str, platform: Platform) -> str:
    """fp32 (what PyTorch's fp16 and bf16 products do) | fp16: fp16 products accumulating in fp16
    (torch.backends.cuda.matmul.allow_fp16_accumulation), a GPU option for --dtype fp16."""
    _choice("accumulate", accumulate, ACCUMULATES)
    if accumulate == "fp16" and (dtype != "fp16" or platform.device.kind != "gpu"):
        raise UserError("--accumulate fp16 is a GPU's fp16 products accumulating in fp16: give --dtype fp16 on a GPU")
    return accumulate


def _check_attn(attn: str, platform: Platform) -> str:
    _choice("attn", attn, ATTNS)
    if attn == "flash" and platform.device.kind != "gpu":
        raise UserError("--attn flash needs a GPU (FlashAttention has no CPU kernel); use sdpa")
    if attn == "flash3" and platform.device.architecture.lower() not in FLASH3_ARCHITECTURES:
        raise UserError(f"--attn flash3 is FlashAttention-3, for Hopper GPUs; {platform.device.name} is not one")
    return attn


def _check_overlaps(sp: bool, async_tp: bool, prefetch: bool, tp: int, zero: int) -> None:
    """--sp and --async-tp act on tensor-parallel collectives, --prefetch on ZeRO-3's gathers."""
    if sp and tp < 2:
        raise UserError("--sp splits the norms and residuals over the tensor-parallel ranks: give --tp 2 or more")
    if async_tp and not sp:
        raise UserError("--async-tp overlaps sequence parallelism's all-gathers and reduce-scatters: give --sp "
                        "(and --tp 2 or more)")
    if prefetch and zero != 3:
        raise UserError("--prefetch issues ZeRO-3's / FSDP's parameter all-gathers ahead: give --zero 3")


@dataclass(frozen=True)
class TrainSetup:
    """A pre-training or fine-tuning step on a platform."""

    kind: str  # pretrain | finetune
    model: ModelSpec
    platform: Platform
    dtype: str = "bf16"
    micro_batch: int = 1
    seq: int = 2048
    grad_accum: int = 1
    zero: int = 0
    offload: str = "none"
    recompute: str = "none"
    attn: str = "sdpa"
    tp: int = 1
    pp: int = 1
    pp_virtual: int = 1
    """Model chunks on each pipeline device: Megatron-LM's interleaved 1F1B schedule when > 1."""
    pp_flushes: int = 1
    """Pipeline flushes a step: its micro-batches run as this many separate pipelines, each with its
    own bubble (NeMo AutoModel's local batch is one flush; gradients accumulate across them)."""
    cp: int = 1
    """Context-parallel degree: each sequence split over cp devices, its attention a ring."""
    ep: int = 1
    """Expert-parallel degree: the routed experts split over ep of the data-parallel ranks."""
    optimizer: str = "adamw"
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = LORA_TARGETS_DEFAULT
    lora_dropout: str = "none"
    """none | input | output: where the adapters' dropout acts (op_costs.LORA_DROPOUTS)."""
    quant: str = "none"
    engine_name: str = "auto"
    """The engine that runs the step (bench pretrain's --engine): auto picks as it does."""
    precision: str = "mixed"
    """mixed (16-bit compute, fp32 master weights and optimizer states) | pure (everything in
    the compute dtype, no master: torchtune's dtype=bf16 recipes)."""
    loss: str = "unchunked"
    """unchunked | chunked | fused: how the loss meets the logits (op_costs.LOSSES)."""
    accumulate: str = "fp32"
    """fp32 | fp16: where the products accumulate (check_accumulate)."""
    kernels: str = "eager"
    """eager | fused: how the layers' element-wise modules run (op_costs.KERNELS); eager as
    `bench pretrain` runs transformers' modules, fused under torch.compile or fused kernels."""
    float8: str = "none"
    """none | tensorwise: the layers' linears in float8 (torchao's Float8Linear; op_costs.FLOAT8_RECIPES)."""
    sp: bool = False
    """Sequence parallelism with --tp: norms and residuals on 1/tp of the tokens (Megatron-LM's)."""
    async_tp: bool = False
    """With --sp: the TP collectives overlapped with the products they feed and follow."""
    prefetch: bool = False
    """With ZeRO-3 / FSDP: each unit's all-gather issued while the unit before computes."""
    head: str = "parallel"
    """parallel | gathered | replicated: the output head and loss under TP (op_costs.HEADS)."""
    held_logits: str = "none"
    """none | compute | fp32: the logits the loop keeps through backward (activations.HELD_LOGITS)."""
    dp: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        _choice("kind", self.kind, mn.TRAIN_KINDS)
        _check_engine(self.engine_name, self.zero, self.offload, self.platform.num_devices)
        check_compute_dtype(self.dtype)
        _positive(micro_batch=self.micro_batch, seq=self.seq, grad_accum=self.grad_accum)
        if self.zero not in (0, 1, 2, 3):
            raise UserError(f"--zero must be a ZeRO stage 0, 1, 2 or 3, got {self.zero}")
        _choice("offload", self.offload, OFFLOADS)
        _choice("recompute", self.recompute, RECOMPUTES)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("loss", self.loss, LOSSES)
        _choice("float8", self.float8, FLOAT8_RECIPES)
        _choice("kernels", self.kernels, KERNELS)
        _choice("head", self.head, HEADS)
        _choice("held-logits", self.held_logits, HELD_LOGITS)
        if self.held_logits != "none" and self.loss == "fused":
            raise UserError("--held-logits with --loss fused: a fused loss makes no logits to hold")
        check_accumulate(self.accumulate, self.dtype, self.platform)
        if self.float8 != "none" and self.lora_rank:
            raise UserError("--float8 with LoRA is not modelled (float8 linears train every weight)")
        _check_attn(self.attn, self.platform)
        _check_overlaps(self.sp, self.async_tp, self.prefetch, self.tp, self.zero)
        if self.seq > self.model.max_position_embeddings:
            raise UserError(f"--seq {self.seq} is longer than {self.model.name} allows "
                            f"({self.model.max_position_embeddings} positions)")
        if self.offload == "optimizer" and self.zero < 1:
            raise UserError("--offload optimizer needs --zero 1, 2 or 3 (ZeRO-Offload partitions the optimizer)")
        if self.offload == "params" and self.zero != 3:
            raise UserError("--offload params needs --zero 3 (ZeRO-Infinity offloads partitioned parameters)")
        if self.lora_rank < 0:
            raise UserError(f"--lora-rank must be 0 (no LoRA) or positive, got {self.lora_rank}")
        _choice("lora-dropout", self.lora_dropout, LORA_DROPOUTS)
        if self.lora_dropout != "none" and not self.lora_rank:
            raise UserError("--lora-dropout acts on LoRA's adapters: give --lora-rank")
        quant = check_quant(self.quant)
        object.__setattr__(self, "quant", quant)
        if self.kind == mn.PRETRAIN and (self.lora_rank or quant != "none"):
            raise UserError("pretrain trains every weight: --lora-rank and --quant apply to finetune only")
        if quant != "none" and not self.lora_rank:
            raise UserError(f"--quant {quant} freezes the base weights: give --lora-rank (QLoRA)")
        object.__setattr__(self, "dp", _check_parallel(self.model, self.platform, self.tp, self.pp))
        _check_virtual_stages(self.model, self.pp, self.pp_virtual)
        _check_flushes(self.pp, self.pp_flushes, self.grad_accum)
        object.__setattr__(self, "dp", _check_context_parallel(self.cp, self.dp, self.seq, self.attn, self.tp,
                                                               self.pp))
        check_expert_parallel(self.model, self.ep, self.dp)

    @property
    def e(self) -> float:
        return dtype_bytes(self.dtype)

    @property
    def method(self) -> str:
        if not self.lora_rank:
            return "full"
        return "qlora" if self.quant != "none" else "lora"

    @property
    def engine(self) -> str:
        """The engine asked for, or the one `bench pretrain` would pick (workloads.train_config.
        resolve_engine), so that `validate` joins estimate and measurement; optimizer-only
        offload needs DeepSpeed."""
        if self.engine_name != "auto":
            return self.engine_name
        if self.offload == "optimizer":  # FSDP2 offloads everything or nothing
            return "deepspeed"
        if self.zero >= 2:
            return "fsdp"
        return "ddp" if self.zero == 1 or self.platform.num_devices > 1 else "single"

    @property
    def sharded_calls(self) -> int:
        """Collectives per sharded pass of this setup's engine (sharded_collective_calls)."""
        return int(sharded_collective_calls(self.model, int(self.engine == "fsdp"), int(self.engine == "deepspeed"),
                                            self.tp, self.pp))

    @property
    def flat_optimizer(self) -> bool:
        """DeepSpeed's ZeRO-1/2/3 optimizer steps flat fp32 partitions (one tensor per
        parameter group, stage_1_and_2.py's single_partition_of_fp32_groups), not one tensor
        per parameter as torch's does; it then copies the partition back into the parameters."""
        return self.engine == "deepspeed" and self.zero >= 1

    def config(self) -> dict[str, Any]:
        """Config keys shared with measured runs (docs/developing.md)."""
        c = {"model": self.model.name, "hardware": self.platform.name, "engine": self.engine,
             "nproc": self.platform.num_devices, "zero": self.zero, "offload": self.offload,
             "recompute": self.recompute, "attn": self.attn, "dtype": self.dtype, "optimizer": self.optimizer,
             "micro_batch": self.micro_batch, "seq": self.seq, "grad_accum": self.grad_accum, "tp": self.tp,
             "pp": self.pp, "method": self.method, "quant": self.quant, "kind_estimated": self.kind}
        if self.lora_rank:
            c.update(lora_rank=self.lora_rank, lora_targets=",".join(self.lora_targets))
            if self.lora_dropout != "none":  # measured runs have none: only a departure is a key
                c["lora_dropout"] = self.lora_dropout
        if self.ep > 1:
            c["ep"] = self.ep
        if self.pp_virtual > 1:  # measured runs have one chunk a stage: only a departure is a key
            c["pp_virtual"] = self.pp_virtual
        if self.pp_flushes > 1:
            c["pp_flushes"] = self.pp_flushes
        if self.cp > 1:
            c["cp"] = self.cp
        if self.precision != "mixed":  # measured runs are mixed (autocast): only a departure is a key
            c["precision"] = self.precision
        if self.loss != "unchunked":  # measured runs use transformers' loss: only a departure is a key
            c["loss"] = self.loss
        if self.float8 != "none":
            c["float8"] = self.float8
        if self.kernels != "eager":  # measured runs run transformers' eager modules
            c["kernels"] = self.kernels
        if self.accumulate != "fp32":
            c["accumulate"] = self.accumulate
        for key in ("sp", "async_tp", "prefetch"):  # measured runs have none: only a departure is a key
            if getattr(self, key):
                c[key] = True
        if self.head != "parallel" and self.tp > 1:
            c["head"] = self.head
        if self.held_logits != "none":  # measured runs keep only the loss
            c["held_logits"] = self.held_logits
        return c


@dataclass(frozen=True)
class InferSetup:
    """Offline batched generation: prefill `input_len`, decode `output_len` tokens."""

    model: ModelSpec
    platform: Platform
    dtype: str = "bf16"
    batch: int = 1
    input_len: int = 512
    output_len: int = 128
    attn: str = "sdpa"
    quant: str = "none"
    tp: int = 1
    cache: str = "dynamic"
    """The KV cache generate uses: dynamic (transformers' DynamicCache, which appends by
    concatenation) or static (preallocated, written in place, as serving engines' are)."""
    group_size: int = 0
    """int4-weight's group size (0: torchao's 128); weights.check_group_size."""
    kv_dtype: str = "auto"
    """The KV cache's element type: auto (the compute dtype) or fp8 (one byte: vLLM's
    --kv-cache-dtype fp8, TensorRT-LLM's FP8 KV cache), a GPU engine's option."""
    pp: int = 1
    """Pipeline stages: the layers split over pp devices, one batch passing through them in turn."""
    accumulate: str = "fp32"
    """fp32 | fp16: where the products accumulate (check_accumulate)."""
    dp: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        check_compute_dtype(self.dtype)
        _positive(batch=self.batch, input_len=self.input_len, output_len=self.output_len)
        _check_attn(self.attn, self.platform)
        _choice("cache", self.cache, CACHES)
        check_kv_dtype(self.kv_dtype, self.platform)
        check_accumulate(self.accumulate, self.dtype, self.platform)
        object.__setattr__(self, "quant", check_quant(self.quant))
        object.__setattr__(self, "group_size", check_group_size(self.quant, self.group_size))
        if self.input_len + self.output_len > self.model.max_position_embeddings:
            raise UserError(f"--input-len {self.input_len} + --output-len {self.output_len} is longer than "
                            f"{self.model.name} allows ({self.model.max_position_embeddings} positions)")
        object.__setattr__(self, "dp", _check_parallel(self.model, self.platform, self.tp, self.pp))

    @property
    def e(self) -> float:
        return dtype_bytes(self.dtype)

    @property
    def kv_e(self) -> float:
        """Bytes of one KV-cache element."""
        return kv_element_bytes(self.kv_dtype, self.e)

    def config(self) -> dict[str, Any]:
        c = {"model": self.model.name, "hardware": self.platform.name, "batch": self.batch,
             "input_len": self.input_len, "output_len": self.output_len, "dtype": self.dtype, "attn": self.attn,
             "cache": self.cache, "quant": self.quant, "compile": False, "tp": self.tp,
             "nproc": self.platform.num_devices, "kind_estimated": mn.INFER}
        if group_size_key(self.group_size):
            c["group_size"] = self.group_size
        if self.kv_dtype != "auto":  # a departure from the compute dtype is a key of its own
            c["kv_dtype"] = self.kv_dtype
        if self.pp > 1:  # measured generate runs on one device: only a departure is a key
            c["pp"] = self.pp
        if self.accumulate != "fp32":
            c["accumulate"] = self.accumulate
        return c
