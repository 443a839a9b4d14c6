"""One offline-inference grid point, typed (no torch).

`bench infer`, `dissect infer`, the quick suite and a suite's `infer` entries build points
with `infer_launch.expand_grid`; the child (`infer_child.run`) reads one back. On the way
it travels as `InferPoint.to_config()`, a JSON dict, which is also the record's config:
the shared `infer` keys of docs/developing.md plus warmup, repeats, seed and device.
"""
from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from llmdissect.dtypes import COMPUTE_DTYPES
from llmdissect.modeling import ATTN_IMPLS
from llmdissect.techniques.quantization import QUANT_METHODS

# The choices are those of the modules that implement them (a Literal of a tuple is the
# Literal of its items): a new attention, dtype or quantization is written there once.
ComputeDtype = Literal[COMPUTE_DTYPES]
Attn = Literal[tuple(ATTN_IMPLS)]
Quant = Literal[QUANT_METHODS]
Cache = Literal["dynamic", "static"]
CACHES: tuple[str, ...] = get_args(Cache)

GRID_FIELDS = ("batch", "input_len", "output_len", "cache", "quant")
"""The fields `bench infer` takes as comma-separated lists: every combination is one point."""


class InferPoint(BaseModel):
    """One offline-inference point: a model, its shapes and options, where it runs."""

    model_config = ConfigDict(extra="forbid")

    model: str
    """Model preset, config.json, or a local model folder (its weights are loaded when it has
    safetensors; otherwise random weights from the spec)."""
    hardware: str
    """The device as records name it: cpu, or the GPU's name (measure.devices)."""
    batch: int = Field(1, ge=1)
    """Sequences per generate call."""
    input_len: int = Field(128, ge=1)
    """Prompt length in tokens (random ids, fixed seed)."""
    output_len: int = Field(64, ge=1)
    """Output length in tokens, fixed: EOS ignored."""
    dtype: ComputeDtype = "fp32"
    """Compute dtype: fp32 | bf16 | fp16."""
    attn: Attn = "sdpa"
    """Attention: eager | sdpa | flash (flash needs CUDA)."""
    cache: Cache = "dynamic"
    """KV cache: dynamic | static."""
    quant: Quant = "none"
    """Weight quantization (techniques.quantization.QUANT_METHODS)."""
    group_size: int = Field(0, ge=0)
    """int4-weight's group size; 0: torchao's default (128), and every other scheme."""
    compile: bool = False
    """torch.compile the model's forward (the compile time lands in first_call_s)."""
    warmup: int = Field(1, ge=0)
    """Untimed generate calls first; the first call is reported as first_call_s."""
    repeats: int = Field(3, ge=1)
    """Timed generate calls (Stats over them)."""
    seed: int = 0
    """Seed of the random weights and prompt ids."""
    device: str
    """The torch device it runs on: cpu or cuda (resolved from auto | cpu | cuda)."""

    def to_config(self) -> dict[str, Any]:
        """The JSON dict the child gets and the record stores (every field, in this order;
        `group_size` only where it departs from the default, as estimates name it)."""
        config = self.model_dump()
        if not config["group_size"]:
            del config["group_size"]
        return config
