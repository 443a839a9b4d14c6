"""Optimizer choice: AdamW (foreach), fused AdamW, or bitsandbytes' 8-bit AdamW; and
ZeRO-1 as PyTorch's ZeroRedundancyOptimizer sharding the optimizer state over ranks."""
from __future__ import annotations

from typing import Any


def optimizer_class(name: str) -> tuple[type, dict[str, Any]]:
    import torch

    if name == "adamw":
        return torch.optim.AdamW, {}
    if name == "adamw-fused":
        return torch.optim.AdamW, {"fused": True}
    if name == "adamw-8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit, {}
    raise ValueError(f"unknown optimizer {name!r}")


def make_optimizer(model: Any, name: str, lr: float, zero: int, distributed: bool) -> Any:
    params = [p for p in model.parameters() if p.requires_grad]
    cls, extra = optimizer_class(name)
    if zero == 1 and distributed:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=cls, lr=lr, **extra)
    return cls(params, lr=lr, **extra)


def state_tensors(optimizer: Any) -> list[Any]:
    """Every tensor of the optimizer's state on this rank (ZeRO-1: only this rank's shard)."""
    import torch

    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps the local one here
    out = []
    for state in inner.state.values():
        out.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return out


def params_with_state(optimizer: Any) -> int:
    """Elements of the parameters that hold optimizer state on this rank."""
    inner = getattr(optimizer, "optim", optimizer)
    return sum(p.numel() for p, s in inner.state.items() if s)
