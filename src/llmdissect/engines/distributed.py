"""The process group of a run: gloo on CPU, NCCL on CUDA; nothing when running alone."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: Any  # torch.device

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_kind: str, force: bool = False) -> DistContext:
    """Join the process group that torchrun describes in the environment."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if (world > 1 or force) and not dist.is_initialized():
        dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device)


def gather_objects(ctx: DistContext, obj: Any) -> list[Any]:
    """Every rank's `obj` (on every rank); `[obj]` when alone."""
    if not ctx.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def shutdown(ctx: DistContext) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
