"""The inference estimate as arithmetic on scalars or numpy arrays.

Prefill (TTFT) runs the forward of b x input_len tokens, compute-bound; each decode step
(TPOT) reads every weight and the KV cache once for b new tokens, bandwidth-bound at small
batch (Pope et al., "Efficiently Scaling Transformer Inference", arXiv 2211.05102; of a MoE
layer only the experts the batch's tokens reach, uniform routing assumed: moe.py), rewrites
the cache to append to it (transformers' concatenating DynamicCache, kvcache.py), and
pays every operator's fixed cost and `generate`'s own per-step cost once more (at batch 1
on a CPU these fixed costs are most of a step; a forward that streams more than a CPU's
last-level cache pays them cold: layertime.cold_cache_scale). Decode
is costed at the mean context input_len + output_len / 2. Throughput grows with batch until
the KV cache fills the memory left beside the weights (`max_batch`).
"""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.perfmodel import comm, kvcache, moe
from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel.ceilings import Machine
from llmdissect.perfmodel.layertime import (
    forward_stream_bytes,
    head_forward_time_s,
    launch_bound,
    layer_elementwise_time_s,
    layer_forward_time_s,
    layer_gemm_time_s,
    with_cold_caches,
)
from llmdissect.perfmodel.op_costs import layer_forward_ops
from llmdissect.perfmodel.roofline import attention_time_s, memory_time_s
from llmdissect.perfmodel.trainmodel import framework_bytes
from llmdissect.specs.models import ModelSpec


def infer_memory(m: ModelSpec, mach: Machine, *, b, n_in, n_out, e, eager, tp, weight_bytes, kv_e=None, pp=1):
    """Per-device bytes: weights, KV cache at the end of generate (`kv_e` bytes an element:
    one for an FP8 cache; the compute dtype's `e` by default), prefill working set. `pp`
    pipeline stages each hold 1/pp of the layers' weights and cache (even stages; the
    embedding and head on the end ones are spread with them)."""
    kv_e = e if kv_e is None else kv_e
    weights = weight_bytes / tp / pp
    kv = kvcache.kv_cache_bytes(m, b, kvcache.generate_positions(n_in, n_out), kv_e, tp) / pp
    activations = kvcache.prefill_working_bytes(m, b, n_in, e, eager, tp)
    tensors = weights + kv + activations
    other = framework_bytes(mach, tensors)
    # the largest batch whose cache and working set fit beside the weights
    per_seq = (kvcache.kv_cache_bytes(m, 1, kvcache.generate_positions(n_in, n_out), kv_e, tp) / pp
               + kvcache.prefill_working_bytes(m, 1, n_in, e, eager, tp))
    a = mach.assumptions
    usable = (mach.platform.device.memory_bytes - a["framework_context_bytes"]) / (1 + a["fragmentation_fraction"]) \
        - weights
    max_batch = (usable > 0) * usable // per_seq
    return {mn.PARAMS_BYTES: weights, mn.GRADS_BYTES: 0 * weights, mn.OPTIMIZER_BYTES: 0 * weights,
            mn.ACTIVATIONS_BYTES: activations, mn.KV_CACHE_BYTES: kv, mn.OTHER_BYTES: other,
            mn.TOTAL_BYTES: tensors + other}, max_batch


def infer_time(m: ModelSpec, mach: Machine, *, b, n_in, n_out, e, eager, tp, dp, layer_weights, concat=1,
               kv_e=None, pp=1, decode_weights=None):
    """TTFT, TPOT, end-to-end latency, throughput and MFU of one batch; needs ceilings.
    `layer_weights` is the bytes of one decoder layer's (possibly quantized) weights;
    `concat` 1 for a cache that appends by concatenation (transformers' dynamic), 0 in place;
    `kv_e` the bytes of a cached element (an FP8 cache's one; `e` by default): decode reads
    the cache at that size, its attention FLOPs are the same. `pp` pipeline stages: one batch
    runs them in turn (generate's loop has one batch in flight, as a naive pipeline of layers
    over devices runs; vLLM overlaps several only when it serves several batches), so the
    compute is one device's, and each step adds pp - 1 sends of the batch's hidden states
    between stages (comm.p2p_time_s over the pipeline's link). `decode_weights`: what a decode
    step's products read for a layer's weights where it differs from the prefill's
    (weights.decode_layer_read_bytes: bitsandbytes' batch-1 4-bit kernel)."""
    net = mach.network
    kv_e = e if kv_e is None else kv_e
    # the forward's fixed costs, hot or cold by the bytes it streams (layertime.cold_cache_scale)
    c = with_cold_caches(mach.ceilings, forward_stream_bytes(m, layer_weights, e, tp,
                                                             kvcache.kv_cache_bytes(m, b, n_in, kv_e, tp)))
    prefill = (m.num_layers * layer_forward_time_s(c, m, b, n_in, e, eager, layer_weights, tp, by_length=True,
                                                   with_cache=True)
               + head_forward_time_s(c, m, b, e, tp, with_loss=0)
               + comm.tensor_parallel_comm_s(net, b * n_in * m.hidden_size * e, tp, m.num_layers, 1)
               + c.generate_call_s)  # generate's set-up and the first token's pick
    ctx = n_in + n_out / 2
    kv_read = kvcache.kv_cache_bytes(m, b, ctx, kv_e, tp)
    # b new tokens through every layer, reading the experts they reach (moe.decode_weight_fraction)
    step_weights = (layer_weights if decode_weights is None else decode_weights) * moe.decode_weight_fraction(m, b)
    c = with_cold_caches(mach.ceilings, forward_stream_bytes(m, step_weights, e, tp, kv_read))
    gemm = m.num_layers * layer_gemm_time_s(c, m, b, e, step_weights, tp)
    # MLA in transformers re-expands the whole cached latent at every step (moe.mla_expansion_flops)
    attn = attention_time_s(c, b * m.num_layers * (fl.layer_attention_flops_fwd(m, ctx)
                                                   + moe.mla_expansion_flops(m, ctx)) / tp,
                            kv_read + b * m.num_layers * moe.mla_expanded_kv_bytes(m, ctx, e) / tp)
    head = head_forward_time_s(c, m, b, e, tp, with_loss=0)
    # a concatenating cache rewrites itself to append the step's keys and values
    append = concat * memory_time_s(c, kvcache.cache_append_bytes(m, b, ctx, kv_e, tp))
    # every layer's operators pay their fixed cost again for each new token, and its cache's
    # update (launched while the kernels run on a GPU: the longer of the two), as does
    # generate's own loop
    kernels = gemm + attn + append + m.num_layers * layer_elementwise_time_s(c, m, b, e, tp)
    layers = m.num_layers * launch_bound(c, kernels / m.num_layers, layer_forward_ops(m), c.cache_update_s)
    tp_comm = comm.tensor_parallel_comm_s(net, b * m.hidden_size * e, tp, m.num_layers, 1)
    pp_net = comm.pipeline_network(net, mach.scale_out, mach.node_devices, tp, pp)
    prefill = prefill + (pp - 1) * comm.p2p_time_s(pp_net, b * n_in * m.hidden_size * e)
    pp_comm = (pp - 1) * comm.p2p_time_s(pp_net, b * m.hidden_size * e)
    tpot = layers + head + c.generate_step_s + tp_comm + pp_comm
    e2e = prefill + (n_out - 1) * tpot
    flops = b * n_in * fl.inference_flops_per_token(m, n_in / 2) + b * n_out * fl.inference_flops_per_token(m, ctx)
    return {mn.TIME: {mn.TTFT_S: prefill, mn.TPOT_S: tpot, mn.E2E_LATENCY_S: e2e},
            mn.TOKENS_PER_S: dp * b * n_out / e2e, mn.PREFILL_TOKENS_PER_S: b * n_in / prefill,
            mn.DECODE_TOKENS_PER_S: b / tpot, mn.MFU: flops / (e2e * c.peak_flops_per_s * c.gemm_peak_scale * tp * pp),
            mn.MODEL_FLOPS_PER_TOKEN: fl.inference_flops_per_token(m, ctx)}
