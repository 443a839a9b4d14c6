"""The time of one serving iteration, and how many KV blocks fit: what servesim runs on.

An iteration of a continuous-batching engine is one forward over the batch's tokens, all
sequences' new tokens side by side (prefill chunks and one token per decoding sequence):

    t = L x (GEMMs at M = tokens rows + element-wise operators + fixed costs)
        + attention: prefill chunks' causal FLOPs (4 d_attn x n (c + n / 2) per layer) and
          the decoding sequences' KV reads (kv_bytes_per_token x context), at the roofline
        + the head for the sequences that produce a token
        + TP all-reduces of the tokens' activations + the engine's own cost per step

with the same calibrated terms as `estimate infer` (layertime, roofline, ceilings; the fixed
costs cold where the iteration streams more than a CPU's last-level cache). The
engine's own cost (building the batch, sampling, handing tokens to requests) is, for
transformers' engine, what `peak` measured of it (micro.serve_engine: per iteration, per
layer of the model and per sequence in the batch); else `generate_step_s` per iteration
(generate's per-step cost outside the model, the closest measured stand-in), else 0; the
estimate's notes say which.
"""
from __future__ import annotations

from llmdissect.perfmodel import comm, kvcache, moe
from llmdissect.perfmodel.ceilings import Machine
from llmdissect.perfmodel.layertime import (
    cold_cache_scale,
    forward_stream_bytes,
    head_forward_time_s,
    launch_bound,
    layer_elementwise_time_s,
    layer_gemm_time_s,
)
from llmdissect.perfmodel.op_costs import layer_forward_ops
from llmdissect.perfmodel.roofline import attention_time_s
from llmdissect.specs.models import ModelSpec


class IterationTime:
    """t(tokens, decode_ctx, prefill_attn, prefill_kv, logits, seqs) in seconds
    (servesim.StepTime); GEMM times cached by row count. `engine_measured`: the engine's own
    costs are the ones peak measured of transformers' engine."""

    def __init__(self, m: ModelSpec, mach: Machine, e: float, tp: int, layer_weight_bytes: float,
                 engine_measured: bool = False, kv_e: float | None = None) -> None:
        self.m, self.mach, self.e, self.tp, self.w = m, mach, e, tp, layer_weight_bytes
        c = mach.ceilings
        self.c = c
        step = c.serve_engine_step_s + m.num_layers * c.serve_engine_layer_s if engine_measured else c.generate_step_s
        self.per_seq = c.serve_engine_seq_s if engine_measured else 0.0
        self.fixed = c.forward_fixed_s + step
        # one position (MLA's latent is not split), at the cache's element size
        self.kv_per_token = kvcache.kv_cache_bytes(m, 1, 1, e if kv_e is None else kv_e, tp)
        self.flops_per_attn_unit = 4 * m.num_layers * m.q_dim / tp  # scores and x V, per query-key pair
        self._rows: dict[int, float] = {}
        self._heads: dict[int, float] = {}

    def _rows_time(self, tokens: int) -> float:
        """One layer's GEMMs and element-wise kernels at this many rows (no fixed costs)."""
        t = self._rows.get(tokens)
        if t is None:
            m, c = self.m, self.c
            # a mixture of experts reads only the experts the iteration's tokens reach
            weights = self.w * moe.decode_weight_fraction(m, tokens)
            t = (layer_gemm_time_s(c, m, tokens, self.e, weights, self.tp)
                 + layer_elementwise_time_s(c, m, tokens, self.e, self.tp))
            self._rows[tokens] = t
        return t

    def _head_time(self, logits: int) -> float:
        t = self._heads.get(logits)
        if t is None:
            # head_forward_time_s adds forward_fixed_s, which self.fixed already holds
            t = head_forward_time_s(self.c, self.m, max(logits, 1), self.e, self.tp, with_loss=0) \
                - self.c.forward_fixed_s
            self._heads[logits] = t
        return t

    def __call__(self, tokens: int, decode_ctx: int, prefill_attn: float, prefill_kv: int, logits: int,
                 seqs: int = 1) -> float:
        attn_flops = self.flops_per_attn_unit * (prefill_attn + decode_ctx)
        attn_bytes = self.kv_per_token * (decode_ctx + prefill_kv)
        m = self.m
        per_layer = self._rows_time(tokens) + attention_time_s(self.c, attn_flops, attn_bytes) / m.num_layers
        tp_comm = comm.tensor_parallel_comm_s(self.mach.network, tokens * m.hidden_size * self.e, self.tp,
                                              m.num_layers, 1)
        # the iteration's fixed costs, hot or cold by the bytes it streams (layertime.cold_cache_scale)
        cold = cold_cache_scale(self.c, forward_stream_bytes(m, self.w * moe.decode_weight_fraction(m, tokens),
                                                             self.e, self.tp, attn_bytes))
        fixed = m.num_layers * (layer_forward_ops(m) * self.c.op_fixed_s + self.c.cache_update_s)
        return (m.num_layers * launch_bound(self.c, per_layer, 0, cold * fixed / m.num_layers) + tp_comm
                + self._head_time(logits) + cold * (self.fixed + self.per_seq * seqs))


def kv_blocks_that_fit(m: ModelSpec, mach: Machine, kv_e: float, tp: int, weight_bytes: float, block_size: int,
                       memory_fraction: float = 0.9) -> int:
    """KV blocks of `kv_e` bytes an element (one for an FP8 cache) in what `memory_fraction` of
    the device leaves beside the weights and the framework's allowance (vLLM's
    gpu_memory_utilization 0.9 by default)."""
    a = mach.assumptions
    usable = mach.platform.device.memory_bytes * memory_fraction - a["framework_context_bytes"] - weight_bytes / tp
    per_block = kvcache.kv_cache_bytes(m, 1, 1, kv_e, tp) * block_size
    return max(int(usable // per_block), 0)
