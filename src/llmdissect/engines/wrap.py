"""Wrap a model for its engine: single (as is), DDP, or FSDP2 `fully_shard` (ZeRO-2/3).

ZeRO-2 is FSDP2 without resharding after forward (parameters stay gathered until backward
ends; gradients and optimizer state sharded); ZeRO-3 reshards after forward (parameters
gathered again in backward). `--offload params` is FSDP2's CPUOffloadPolicy: parameters,
gradients and optimizer state live on the host and the optimizer steps there.
"""
from __future__ import annotations

from typing import Any

from llmdissect.engines.distributed import DistContext
from llmdissect.techniques.recompute import decoder_layers


def wrap_model(model: Any, engine: str, zero: int, offload: str, dtype: str, ctx: DistContext,
               ignore: tuple[str, ...] | list[str] = ()) -> Any:
    """`ignore`: parameters DDP must not average (each rank's own routed experts under --ep)."""
    if engine == "single":
        return model
    if engine == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        if ignore:
            DDP._set_params_and_buffers_to_ignore_for_model(model, list(ignore))
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DDP(model, device_ids=ids)
    if engine == "fsdp":
        return _fully_shard(model, zero, offload, dtype, ctx)
    raise ValueError(f"engine {engine!r} is not wrapped here")


def _fully_shard(model: Any, zero: int, offload: str, dtype: str, ctx: DistContext) -> Any:
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    from llmdissect.dtypes import torch_dtype

    kwargs: dict[str, Any] = {"reshard_after_forward": zero == 3}
    if dtype != "fp32":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch_dtype(dtype), reduce_dtype=torch.float32)
    # Pinned host memory needs a GPU; on a CPU-only machine pinning fails.
    kwargs["offload_policy"] = (CPUOffloadPolicy(pin_memory=ctx.device.type == "cuda") if offload == "params"
                                else OffloadPolicy())
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model
