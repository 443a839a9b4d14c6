"""`--tp N`: Megatron-style tensor parallelism with PyTorch's DTensor `parallelize_module`.

In every decoder layer the q/k/v and gate/up projections are column-parallel (each rank
holds heads/N query heads, kv_heads/N key/value heads and intermediate/N MLP columns) and
the o and down projections row-parallel (their partial sums all-reduced), as in Megatron-LM
(Shoeybi et al., arXiv 1909.08053, section 3): one all-reduce in forward and one in backward
per attention block and per MLP. Embeddings, norms and the output head stay replicated.

The N tensor-parallel ranks are the inner dimension of a 2-D device mesh ("dp", "tp"):
rank = dp_rank x N + tp_rank, so the processes of one node share a TP group. Data
parallelism over the outer dimension is FSDP2 (`fully_shard` on the "dp" mesh, ZeRO-2/3);
with one data-parallel group there is nothing to wrap.
"""
from __future__ import annotations

from typing import Any

from llmdissect.errors import UserError

COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def check_tp(cfg: Any, heads: int, kv_heads: int, intermediate: int) -> str:
    """The checks of --tp that need no torch (UserError, exit 2, on what TP cannot split);
    returns the data-parallel engine: fsdp over several data-parallel groups, else single."""
    tp, world = cfg.tp, cfg.world_size
    if world % tp:
        raise UserError(f"--tp {tp} must divide the number of processes ({world}): nproc = tp x dp")
    for what, n in (("attention heads", heads), ("key/value heads", kv_heads), ("MLP columns", intermediate)):
        if n % tp:
            raise UserError(f"--tp {tp} must divide the model's {what} ({n})")
    dp = world // tp
    if cfg.engine == "deepspeed":
        raise UserError("--tp runs on our DTensor engine, not inside DeepSpeed: drop --engine deepspeed or --tp")
    if cfg.method != "full":
        raise UserError(f"--method {cfg.method} does not combine with --tp here")
    if cfg.compile:
        raise UserError("--compile does not combine with --tp here")
    if dp == 1:
        if cfg.engine not in (None, "single") or cfg.zero or cfg.offload != "none":
            raise UserError(f"--tp {tp} on {world} processes leaves no data parallelism: drop --engine, --zero "
                            "and --offload")
        return "single"
    if cfg.engine not in (None, "fsdp") or cfg.zero < 2:
        raise UserError(f"--tp {tp} with {dp} data-parallel groups shards over them with FSDP2: use --zero 2 or 3")
    if cfg.offload == "optimizer":
        raise UserError("FSDP2 offloads parameters, gradients and optimizer state together: use --offload params")
    return "fsdp"


def dp_rank(rank: int, tp: int) -> int:
    """This rank's index along the data-parallel dimension (TP is the inner one)."""
    return rank // tp


def parallelize(model: Any, tp: int, world: int, zero: int, offload: str, dtype: str, device_type: str) -> Any:
    """Split each decoder layer over the "tp" mesh dimension; FSDP2 over "dp" when there are several."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from llmdissect.techniques.recompute import decoder_layers

    dp = world // tp
    mesh = init_device_mesh(device_type, (dp, tp), mesh_dim_names=("dp", "tp"))
    plan: dict[str, Any] = {name: ColwiseParallel() for name in COLWISE}
    plan.update({name: RowwiseParallel() for name in ROWWISE})
    for layer in decoder_layers(model):
        parallelize_module(layer, mesh["tp"], plan)
    if dp > 1:
        _shard_dp(model, mesh["dp"], zero, offload, dtype, device_type)
    return model


def _shard_dp(model: Any, dp_mesh: Any, zero: int, offload: str, dtype: str, device_type: str) -> None:
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    from llmdissect.dtypes import torch_dtype
    from llmdissect.techniques.recompute import decoder_layers

    kwargs: dict[str, Any] = {"mesh": dp_mesh, "reshard_after_forward": zero == 3}
    if dtype != "fp32":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch_dtype(dtype), reduce_dtype=torch.float32)
    kwargs["offload_policy"] = (CPUOffloadPolicy(pin_memory=device_type == "cuda") if offload == "params"
                                else OffloadPolicy())
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)


def make_optimizer(model: Any, lr: float) -> Any:
    """AdamW without foreach: its parameters mix DTensors (split) and plain tensors (replicated)."""
    import torch

    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, foreach=False)
