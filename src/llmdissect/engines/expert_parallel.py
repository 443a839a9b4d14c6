"""`--ep N`: expert parallelism for training, over any torch.distributed backend (gloo on a CPU).

Every rank is a data-parallel rank of the dense part (attention, norms, router, shared experts,
embeddings: DDP averages their gradients); the routed experts of each MoE layer are split over
groups of N consecutive ranks, each rank holding num_experts/N of them. A MoE layer then runs
as GShard does (Lepikhin et al., arXiv 2006.16668, section 2.2; Megatron-Core's "alltoall"
token dispatcher): each rank sends every (token, chosen expert) pair to the rank that holds
the expert (dispatch all-to-all), the experts run on what they received, and the outputs go
back the same way (combine all-to-all), weighted and summed there by the router's weights. In
backward the two all-to-alls run in reverse. So per MoE layer and micro-batch: two all-to-alls
forward, two backward, each of k x tokens x hidden values less those that stay on the rank,
which is what `perfmodel.moe` counts for `estimate --ep`.

An expert's gradient arrives summed over the ranks of its group (their tokens reached it);
summed again over the ranks that hold the same experts (N < world size) and divided by the
world size, it is the mean over all ranks that DDP gives every other parameter.

The expert modules of transformers' Mixtral, Qwen3-MoE, OLMoE and DeepSeek-V3 share a layout
(`gate_up_proj` [E, 2I, H], `down_proj` [E, H, I], forward(hidden, top_k_index,
top_k_weights)); gpt-oss's (biases, a clamped activation) is not split here.
"""
from __future__ import annotations

from typing import Any

from llmdissect.errors import UserError

# model_type values whose transformers expert module has the layout above
EP_FAMILIES = ("mixtral", "qwen3_moe", "olmoe", "deepseek_v3")


def check_ep(cfg: Any, spec: Any) -> None:
    """The checks of --ep that need no torch (UserError, exit 2, for what cannot run)."""
    from llmdissect.perfmodel.moe import check_expert_parallel

    if cfg.ep == 1:
        return
    check_expert_parallel(spec, cfg.ep, cfg.world_size)  # what the estimate checks: a MoE model, ep | E, ep | dp
    if spec.model_type not in EP_FAMILIES:
        raise UserError(f"--ep runs the expert layout of {', '.join(EP_FAMILIES)} here; {spec.model_type}'s "
                        "experts (biases, clamped activation) are not split")
    if cfg.tp > 1:
        raise UserError("--ep does not combine with --tp here")
    if cfg.engine not in (None, "ddp") or cfg.zero != 0 or cfg.offload != "none":
        raise UserError("--ep runs with DDP for the dense part (ZeRO-0): drop --engine, --zero and --offload")
    if cfg.compile:
        raise UserError("--compile does not combine with --ep here")
    if cfg.method != "full" and "experts" in cfg.lora_targets.split(","):
        raise UserError("--ep splits the experts' weights, which LoRA on `experts` wraps: adapt the attention only")


class _ExpertGroup:
    """The process groups of one rank: its expert-parallel group (ep consecutive ranks) and the
    group of ranks that hold the same experts (same position in their expert-parallel group)."""

    def __init__(self, ep: int, rank: int, world: int):
        import torch.distributed as dist

        self.ep, self.index, self.world = ep, rank % ep, world
        self.group = self.replicas = None
        for first in range(0, world, ep):  # every rank creates every group, in the same order
            g = dist.new_group(list(range(first, first + ep)))
            if first <= rank < first + ep:
                self.group = g
        for index in range(ep):
            g = dist.new_group(list(range(index, world, ep)))
            if index == self.index:
                self.replicas = g


def _local_experts_module(experts: Any, where: _ExpertGroup) -> Any:
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    class LocalExperts(torch.nn.Module):
        """This rank's share of one layer's routed experts, with the dispatch and combine."""

        def __init__(self) -> None:
            super().__init__()
            self.local = experts.gate_up_proj.shape[0] // where.ep
            first = where.index * self.local
            self.gate_up_proj = torch.nn.Parameter(experts.gate_up_proj.detach()[first:first + self.local].clone())
            self.down_proj = torch.nn.Parameter(experts.down_proj.detach()[first:first + self.local].clone())
            self.act_fn = experts.act_fn
            for mine, theirs in ((self.gate_up_proj, experts.gate_up_proj), (self.down_proj, experts.down_proj)):
                mine.requires_grad_(theirs.requires_grad)  # frozen under LoRA
                mine.llmdissect_shards = where.ep  # the whole model's count is this times ep

        def forward(self, hidden: Any, top_k_index: Any, top_k_weights: Any) -> Any:
            tokens, k = top_k_index.shape
            expert = top_k_index.reshape(-1)
            dest = torch.div(expert, self.local, rounding_mode="floor")
            order = torch.argsort(dest, stable=True)  # pairs grouped by the rank that holds their expert
            send = torch.bincount(dest, minlength=where.ep)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send, group=where.group)
            send_sizes, recv_sizes = send.tolist(), recv.tolist()
            token = torch.arange(tokens, device=hidden.device).repeat_interleave(k)[order]
            local_id = torch.empty(sum(recv_sizes), dtype=expert.dtype, device=hidden.device)
            dist.all_to_all_single(local_id, (expert[order] - dest[order] * self.local).contiguous(),
                                   recv_sizes, send_sizes, group=where.group)
            received = fc.all_to_all_single_autograd(hidden[token].contiguous(), recv_sizes, send_sizes, where.group)
            out = torch.zeros_like(received)
            for e in range(self.local):
                rows = (local_id == e).nonzero().squeeze(1)
                if rows.numel() == 0:
                    continue
                gate, up = torch.nn.functional.linear(received[rows], self.gate_up_proj[e]).chunk(2, dim=-1)
                y = torch.nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e])
                out = out.index_add(0, rows, y)
            back = fc.all_to_all_single_autograd(out, send_sizes, recv_sizes, where.group)
            weights = top_k_weights.reshape(-1)[order].unsqueeze(1).to(back.dtype)
            return torch.zeros_like(hidden).index_add(0, token, (back * weights).to(hidden.dtype))

    return LocalExperts()


def parallelize(model: Any, ep: int, rank: int, world: int) -> tuple[list[str], Any]:
    """Replace every MoE layer's routed experts with this rank's share. Returns the names of
    the expert parameters (DDP must leave them alone) and the hook that finishes their
    gradients before the optimizer step."""
    import torch.distributed as dist

    where = _ExpertGroup(ep, rank, world)
    names: list[str] = []
    params = []
    for name, module in list(model.named_modules()):
        if not name.endswith("mlp.experts") or not hasattr(module, "gate_up_proj"):
            continue
        parent = model.get_submodule(name.rsplit(".", 1)[0])
        local = _local_experts_module(module, where)
        parent.experts = local
        names += [f"{name}.gate_up_proj", f"{name}.down_proj"]
        params += [local.gate_up_proj, local.down_proj]
    if not params:
        raise UserError("--ep: the model has no routed experts in the layout this engine splits")

    def finish_expert_grads() -> None:
        for p in params:
            if p.grad is None:
                continue
            if world > ep:
                dist.all_reduce(p.grad, group=where.replicas)
            p.grad.div_(world)

    return names, finish_expert_grads
