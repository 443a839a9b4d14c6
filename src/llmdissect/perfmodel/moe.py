"""Mixture-of-experts and latent-attention arithmetic: what a token computes, what a decode
step reads, what expert parallelism sends. Small pure functions on scalars or numpy arrays.

Notation: h hidden size, E routed experts, k experts per token, f_e an expert's width,
L_moe the MoE layers, a heads; MLA's ranks r_q, r_kv, its rope and nope head dims d_r, d_n
and the value head dim d_v.
"""
from __future__ import annotations

from llmdissect.errors import UserError
from llmdissect.perfmodel import op_costs as opc
from llmdissect.specs.models import ModelSpec


def expected_distinct_experts(E, k, b):
    """Experts a batch of b tokens reaches in one MoE layer: E (1 - (1 - k/E)^b).

    Assumes uniform, independent routing: each token sends to k distinct experts drawn
    uniformly, so a given expert misses one token with probability 1 - k/E and all b
    tokens with (1 - k/E)^b; linearity of expectation over the E experts gives the rest.
    A trained router is not uniform (load imbalance), so this is the most experts a batch
    can be expected to read; b = 1 gives k, b -> infinity gives E.
    """
    return E * (1 - (1 - k / E) ** b)


def router_flops_fwd(m: ModelSpec):
    """The router's scores per token: one h x E matmul, 2 h E."""
    return opc.linear_flops(1, m.hidden_size, m.num_experts)


def routed_experts_flops_fwd(m: ModelSpec):
    """The token's k routed experts, each a gated MLP of width f_e: k x 2 x 3 h f_e."""
    width = m.experts_per_token * m.expert_intermediate_size
    return opc.linear_flops(1, m.hidden_size, (m.mlp_in_matrices + 1) * width)


def shared_experts_flops_fwd(m: ModelSpec):
    """DeepSeek's shared experts, one MLP of width n_shared f_e every token passes: 2 x 3 h n_s f_e."""
    width = m.num_shared_experts * m.expert_intermediate_size
    return opc.linear_flops(1, m.hidden_size, (m.mlp_in_matrices + 1) * width)


def moe_layer_flops_fwd(m: ModelSpec):
    """One MoE layer's MLP per token: router + top-k experts + shared experts (2 x the
    active MLP parameters, ModelSpec.params_moe_layer_active, biases aside)."""
    return router_flops_fwd(m) + routed_experts_flops_fwd(m) + shared_experts_flops_fwd(m)


def mla_projection_flops_fwd(m: ModelSpec):
    """MLA's projections per token, as transformers runs them (decompressed keys and values):
    2 x (h r_q + r_q a (d_n + d_r) + h (r_kv + d_r) + r_kv a (d_n + d_v) + a d_v h)
    (DeepSeek-V2, arXiv 2405.04434, section 2.1)."""
    return sum(opc.linear_flops(1, k, n) for k, n in m.mla_gemm_shapes())


def mla_absorbed_decode_flops(m: ModelSpec, context):
    """One decoded token's MLA with the up-projections absorbed (DeepSeek-V2, section 2.1.2:
    W_UK folds into the query, W_UV into the output), attending in the latent space:
      q: 2 (h r_q + r_q a (d_n + d_r)); q_nope -> latent: 2 a d_n r_kv;
      kv_a: 2 h (r_kv + d_r); scores over c positions: 2 a c (r_kv + d_r);
      weights x latent: 2 a c r_kv; latent -> v: 2 a r_kv d_v; o: 2 a d_v h.
    """
    h, a, rq, rkv = m.hidden_size, m.num_heads, m.q_lora_rank, m.kv_lora_rank
    dn, dr, dv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    q = 2 * (h * rq + rq * a * (dn + dr)) if rq else 2 * h * a * (dn + dr)
    per_token = q + 2 * a * dn * rkv + 2 * h * (rkv + dr) + 2 * a * rkv * dv + 2 * a * dv * h
    return per_token + 2 * a * context * (rkv + dr) + 2 * a * context * rkv


def routing_activation_bytes(m: ModelSpec, b, s, e):
    """What a MoE layer saves for backward beyond its experts' MLP activations: the router's
    fp32 logits (b s E x 4, softmax and top-k); each expert's gathered input, the token
    copied once per expert it was sent to (k b s h e); and each expert's output, kept for
    the gradient of its routing weight (k b s h e), as transformers' experts save them
    (read with saved_tensors_hooks). Dropless: no capacity factor pads or drops tokens (a
    capacity factor C would scale the per-expert terms by C). 0 for a dense model."""
    return m.is_moe * b * s * (4 * m.num_experts + 2 * m.experts_per_token * m.hidden_size * e)


def mla_latent_values_per_position(m: ModelSpec):
    """What an MLA cache keeps per position and layer: the compressed kv (r_kv) and the rope
    key shared by the heads (d_r), one vector for keys and values together (DeepSeek-V2,
    arXiv 2405.04434, table 1: (d_c + d_h^R) l per token). transformers' DeepseekV3Attention
    caches exactly these (keys r_kv wide, values d_r, one "head"), as do vLLM and SGLang;
    a decompressed cache would hold a (d_n + d_r + d_v), 2 a (d_n + d_v) / (r_kv + d_r) times more."""
    return m.kv_lora_rank + m.qk_rope_head_dim


def mla_expansion_flops(m: ModelSpec, positions):
    """transformers' DeepseekV3Attention keeps the latent in its cache but up-projects all
    of it (kv_b_proj) at every forward to attend in the decompressed form: per layer and
    sequence 2 x positions x r_kv x a (d_n + d_v), which at decode grows with the context
    where the absorbed form (mla_absorbed_decode_flops) does not. 0 for other models."""
    return m.is_mla * 2 * positions * m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)


def mla_expanded_kv_bytes(m: ModelSpec, positions, e):
    """Bytes per layer and sequence of the keys (a (d_n + d_r)) and values (a d_v) that
    expansion writes and attention reads again: 2 x positions x a (d_n + d_r + d_v) x e."""
    return m.is_mla * 2 * positions * m.num_heads * (m.head_dim + m.v_head_dim) * e


def cached_positions(m: ModelSpec, positions):
    """Positions held, summed over the layers: global layers keep every one, sliding-window
    layers at most W (transformers' DynamicSlidingWindowLayer concatenates the step's key to
    the last W - 1 and keeps a W - 1 view of that W-position tensor, so W stay allocated)."""
    local = m.num_layers - m.global_layers
    window = m.sliding_window or 0
    capped = positions + (window - positions) * (positions > window)  # min(positions, W), arrays too
    return m.global_layers * positions + local * capped


def all_to_all_bytes_per_layer(m: ModelSpec, tokens, ep, e):
    """Bytes one device sends in one MoE layer's forward under expert parallelism `ep`:
    dispatch and combine each move the device's `tokens` x k hidden vectors, of which the
    share (ep - 1) / ep goes to experts on other devices (uniform routing): 2 T k h e (ep-1)/ep.
    The backward sends the same again (the gradients of both). GShard (Lepikhin et al.,
    arXiv 2006.16668) and DeepSpeed-MoE (Rajbhandari et al., arXiv 2201.05596) describe the
    two all-to-alls per MoE layer."""
    return 2 * tokens * m.experts_per_token * m.hidden_size * e * (ep - 1) / ep


def all_to_all_time_s(net, m: ModelSpec, tokens, ep, e, layers, calls_per_layer):
    """`calls_per_layer` all-to-alls (2 in a forward: dispatch and combine; 2 more in a
    backward) in each of `layers` MoE layers over `ep` ranks of the network `net`
    (comm.Network), each sending half of all_to_all_bytes_per_layer: per call the fixed cost,
    a latency step per peer, and the bytes at the link's bandwidth. 0 when ep = 1."""
    multi = (ep > 1) * 1
    per_call = all_to_all_bytes_per_layer(m, tokens, ep, e) / 2
    call = multi * (net.base_s + (ep - 1) * net.alpha_s) + per_call / (net.bandwidth_bytes_per_s * net.efficiency)
    return layers * calls_per_layer * call


def routed_expert_params(m: ModelSpec):
    """Every routed expert of the model: what expert parallelism divides over `ep` ranks."""
    return m.moe_layers * m.num_experts * m.params_expert


def decode_expert_bytes(m: ModelSpec, b, weight_bytes_per_param, ep=1):
    """Routed-expert weights one decode step of b tokens reads on one device: the expected
    distinct experts of each MoE layer (expected_distinct_experts, uniform routing), of
    which a device holds 1/ep."""
    reached = expected_distinct_experts(m.num_experts, m.experts_per_token, b)
    return m.moe_layers * reached * m.params_expert * weight_bytes_per_param / ep


def decode_weight_fraction(m: ModelSpec, b):
    """Share of a layer's matmul weights (mean over layers) one decode step of b tokens
    reads: all but the routed experts no token of the batch was sent to, E - E_reached per
    MoE layer (expected_distinct_experts, uniform routing). 1 for a dense model."""
    if not m.is_moe:
        return 1 + 0 * b
    unread = m.moe_layers * (m.num_experts - expected_distinct_experts(m.num_experts, m.experts_per_token, b))
    return 1 - unread * m.params_expert / (m.num_layers * (m.params_attention_per_layer + m.params_mlp_per_layer))


def check_expert_parallel(m: ModelSpec, ep: int, devices: int) -> None:
    """`--ep`: a positive degree that divides the routed experts and the `devices` it is
    carved from (the data-parallel ranks)."""
    if ep is None or ep <= 0:
        raise UserError(f"--ep must be a positive integer, got {ep}")
    if ep == 1:
        return
    if not m.is_moe:
        raise UserError(f"--ep {ep} needs a mixture-of-experts model; {m.name} is dense")
    if m.num_experts % ep:
        raise UserError(f"--ep {ep} does not divide the {m.num_experts} experts of {m.name}")
    if devices % ep:
        raise UserError(f"--ep {ep} does not divide the {devices} data-parallel ranks")
