"""What one `bench ops` run is asked: a typed config, and its check before any child starts."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

from llmdissect.errors import UserError


class OpsConfig(BaseModel):
    """One `bench ops` run."""

    model_config = {"extra": "forbid"}

    model: str = "tiny-llama"
    """Preset, model TOML, config.json or folder."""
    tokens: int = Field(512, ge=1)
    """Tokens through the layer (batch x sequence); attention splits them into sequences."""
    passes: Literal["fwd", "bwd", "both"] = "both"
    """Which passes are timed: fwd | bwd | both."""
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Compute dtype of the operators."""
    seqs: Optional[list[int]] = None
    """Attention sequence lengths (default: tokens/4, tokens/2, tokens, at least 16)."""
    quant: bool = True
    """Include bitsandbytes/torchao quantize, dequantize and matmul cases."""
    min_time_s: float = Field(0.2, ge=0)
    """Seconds each operator is timed for (at least 5 runs)."""
    device: str = "cpu"
    """The torch device: cpu or cuda:N (resolved from auto | cpu | cuda by `parse_ops_config`)."""
    seed: int = 0
    """Seed of the random inputs."""


def parse_seqs(seqs: str | None) -> list[int] | None:
    """`"128,512"` -> [128, 512]; UserError unless positive integers."""
    if not seqs:
        return None
    try:
        seq_list = [int(s) for s in seqs.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seqs must be comma-separated integers, got {seqs!r}") from None
    if not seq_list or min(seq_list) < 1:
        raise UserError(f"--seqs must be positive integers, got {seqs!r}")
    return seq_list


def parse_ops_config(*, model: str = "tiny-llama", tokens: int = 512, passes: str = "both", dtype: str = "fp32",
                     seqs: str | None = None, quant: bool = True, min_time_s: float = 0.2, device: str = "auto",
                     seed: int = 0) -> OpsConfig:
    """A validated OpsConfig from a command's options (UserError on bad input)."""
    from llmdissect.config import parse_config
    from llmdissect.measure.devices import resolve_device
    from llmdissect.specs.models import get_model

    if passes not in ("fwd", "bwd", "both"):
        raise UserError(f"--pass must be fwd, bwd or both, got {passes!r}")
    seq_list = parse_seqs(seqs)
    torch_device = resolve_device(device).torch_device
    cfg = parse_config(OpsConfig, model=model, tokens=tokens, passes=passes, dtype=dtype, seqs=seq_list, quant=quant,
                       min_time_s=min_time_s, device="cuda:0" if torch_device == "cuda" else torch_device, seed=seed)
    spec = get_model(cfg.model)
    longest = max(seq_list or [min(tokens, spec.max_position_embeddings)])
    if longest > spec.max_position_embeddings:
        raise UserError(f"--seqs {longest} is longer than {spec.name} allows ({spec.max_position_embeddings})")
    return cfg
