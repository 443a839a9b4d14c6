"""Time of one decoder layer's forward, and of the output head, by the roofline.

One forward of T = b x s tokens through a layer on one of `tp` tensor-parallel devices
(e bytes per activation element, `we` bytes per weight element). Every operator's FLOPs
and bytes are op_costs' (the table `bench ops` measures, whose time-weighted efficiencies
per class the roofline applies, so the counts must be the same ones):

- GEMMs (fused q/k/v, o, fused gate/up, down): 2 T x layer matmul weights / tp FLOPs,
  moving the weights once and each input and output once;
- attention core: causal kernels (sdpa/flash) score the unmasked s(s+1)/2 pairs, eager the
  full square, and eager also writes and re-reads the b a s^2 scores (4 passes);
- element-wise: two RMSNorms, RoPE on q and k, SwiGLU, two residual adds; in a MoE layer
  the routing, dispatch and combine (op_costs.moe_routing).

Scalars or numpy arrays throughout.
"""
from __future__ import annotations

from dataclasses import replace

from llmdissect.perfmodel import moe
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.roofline import (
    Ceilings,
    attention_time_s,
    experts_gemm_time_s,
    gemm_time_s,
    memory_time_s,
    op_time_s,
    vmin,
)
from llmdissect.specs.models import ModelSpec


def layer_weight_elements(m: ModelSpec):
    """Matmul weights of one layer."""
    return m.params_attention_per_layer + m.params_mlp_per_layer


def attention_gemm_shapes(m: ModelSpec):
    """(k, n) of the attention's GEMMs: q, k, v, o; MLA's q_a, q_b, kv_a, kv_b, o. The last is o."""
    if m.is_mla:
        return tuple(m.mla_gemm_shapes())
    h = m.hidden_size
    return ((h, m.q_dim), (h, m.kv_dim), (h, m.kv_dim), (m.q_dim, h))


def layer_gemm_shapes(m: ModelSpec):
    """(k, n) of the layer's GEMMs as transformers' Llama runs them, one nn.Linear each:
    q, k, v, o, gate, up, down (the projections of op_costs.LAYER_FORWARD_OPS). In a MoE
    layer gate, up and down stand for the token's k experts and the shared ones (n = their
    summed width: the same FLOPs, as if one GEMM); the router's h x E is left out (under 1 %
    of the layer's FLOPs in every preset)."""
    h, f = m.hidden_size, m.mlp_token_width
    return (*attention_gemm_shapes(m), *[(h, f)] * m.mlp_in_matrices, (f, h))


def row_parallel_gemm_indices(m: ModelSpec) -> set[int]:
    """Positions in layer_gemm_shapes of the products tensor parallelism splits by their input,
    not their output (ROW_PARALLEL: o_proj and down_proj)."""
    return {len(attention_gemm_shapes(m)) - 1, len(layer_gemm_shapes(m)) - 1}


def layer_float8_cast_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1, passes="fwd", share=1.0):
    """The float8 casts of a layer's linears (op_costs.float8_cast_bytes) on one TP rank, at the
    element-wise rate: a column-parallel product casts the whole input and 1/tp of its weight
    and output, a row-parallel one (o, down) 1/tp of its input and weight and the whole output.
    `share`: the fraction of the layer's products that run (recomputation's)."""
    rows = row_parallel_gemm_indices(m)
    total = 0.0
    for i, (k, n) in enumerate(layer_gemm_shapes(m)):
        row = i in rows
        total += opc.float8_cast_bytes(tokens * k / (tp if row else 1), k * n / tp, tokens * n / (1 if row else tp),
                                       e, passes)
    return memory_time_s(c, share * total, tokens)


def op_policy_gemms(m: ModelSpec):
    """torchtitan's per-operator selective recomputation ("op" SAC, torchtitan
    parallelize_llama.py `_custom_policy`): in each layer it saves the output of every
    matmul but every second one, counted in the order they run (q, k, v, o, gate, up, down),
    and the fused attention's outputs; everything else is recomputed in backward.
    Returns (saved, recomputed): lists of (k, n, row_parallel) of the layer's GEMMs, where
    row_parallel GEMMs (o, down) produce the whole hidden width on every TP rank."""
    rows = row_parallel_gemm_indices(m)
    tagged = [(k, n, i in rows) for i, (k, n) in enumerate(layer_gemm_shapes(m))]
    return tagged[0::2], tagged[1::2]


def model_param_tensors(m: ModelSpec) -> list[tuple[int, int]]:
    """(count, elements) of a Llama model's parameter tensors: per layer its GEMMs' weights
    and two norms; the embedding, the final norm and (untied) the head. A MoE layer holds its
    router, its experts as two 3-D tensors (gate_up, down) and its shared experts' three."""
    h = m.hidden_size
    out = [(m.num_layers, k * n) for k, n in attention_gemm_shapes(m)] + [(2 * m.num_layers, h)]
    f, fe, fs = m.intermediate_size, m.expert_intermediate_size, m.num_shared_experts * m.expert_intermediate_size
    k = m.mlp_in_matrices
    out += [(m.dense_layers, h * f)] * (k + 1)
    if m.is_moe:
        out += [(m.moe_layers, h * m.num_experts), (m.moe_layers, m.num_experts * k * fe * h),
                (m.moe_layers, m.num_experts * fe * h)] + [(m.moe_layers * (fs > 0), h * fs)] * (k + 1)
    out += [(1, m.vocab_size * h), (1, h)]
    return out if m.tie_word_embeddings else out + [(1, m.vocab_size * h)]


def layer_gemm_time_s(c: Ceilings, m: ModelSpec, tokens, e, weight_bytes, tp=1):
    """The layer's GEMMs, each at the efficiency of its own size; `weight_bytes` is the
    layer's (possibly quantized) weights, shared among them by their number of weights. A
    MoE layer's MLP runs as its experts do (moe_mlp_gemms): one GEMM per expert reached."""
    shapes = layer_gemm_shapes(m)
    weights = sum(k * n for k, n in shapes)
    mlp_from = len(attention_gemm_shapes(m))
    total = 0.0
    for i, (k, n) in enumerate(shapes):
        flops = opc.linear_flops(tokens, k, n) / tp
        io = opc.linear_io_bytes(tokens, k, n, e) / tp
        nbytes = weight_bytes * k * n / weights / tp + io
        if not m.is_moe or i < mlp_from:
            # under TP each rank runs a 1/tp slice of every product (columns or rows alike here)
            total = total + gemm_time_s(c, flops, nbytes, (tokens, k, n / tp), io)
            continue
        for j, (count, rows, gk, gn) in enumerate(moe_mlp_gemms(m, tokens, k, n, down=i == len(shapes) - 1)):
            share = count * rows * gk * gn / (tokens * k * n)  # of this dense-equivalent GEMM's work
            grouped = experts_gemm_time_s(c, flops * share, nbytes * share, rows) if j == 0 else None
            total = total + (grouped if grouped is not None else
                             count * gemm_time_s(c, flops * share / count, nbytes * share / count, (rows, gk, gn / tp),
                                                 io * share / count))
    return total


def moe_mlp_gemms(m: ModelSpec, tokens, k, n, down: bool):
    """The GEMMs one dense-equivalent MLP matrix of a MoE layer (layer_gemm_shapes: k x n,
    its width the token's k experts and the shared ones side by side) stands for, as
    (count, rows, k, n): the routed part is one GEMM per expert reached
    (moe.expected_distinct_experts, uniform routing), each over the T x k / reached tokens
    sent to it, as transformers' grouped experts run them (arXiv 2211.15841, MegaBlocks,
    section 2: a MoE layer's expert computation is a batch of per-expert GEMMs whose row
    counts are set by routing); the shared experts are one GEMM over all tokens. The same
    FLOPs as the dense-equivalent matrix, at the efficiency of their own, smaller sizes."""
    fe, ke, fs = m.expert_intermediate_size, m.experts_per_token, m.num_shared_experts * m.expert_intermediate_size
    reached = moe.expected_distinct_experts(m.num_experts, ke, tokens)
    rows = tokens * ke / reached
    pieces = [(reached, rows, fe, n) if down else (reached, rows, k, fe)]
    if fs:
        pieces.append((1, tokens, fs, n) if down else (1, tokens, k, fs))
    return pieces


def layer_attention_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, tp=1, by_length=False):
    """The attention core's forward (scores, softmax, attention x V). `by_length`: a fused
    kernel at the forward efficiency measured at length s (Ceilings.attention_efficiency_by_seq:
    the kernel's rate rises with s, 36 -> 71 GFLOP/s from 64 to 256 tokens in tiny-llama's
    layer on a 2-core VM), where measured; else at the class's efficiency."""
    a, g, d = m.num_heads, m.num_kv_heads, m.head_dim
    flops = opc.attention_flops(b, s, a, d, causal=1 - eager) / tp
    io = opc.attention_io_bytes(b, s, a, g, d, e) / tp
    scores = eager * opc.eager_scores_bytes(b, s, a, e) / tp
    seq = s if by_length and _fused(eager) else None
    return attention_time_s(c, flops, io, seq) + memory_time_s(c, scores)


def _fused(eager) -> bool:
    """A fused kernel priced for one configuration (advise's arrays take the class)."""
    return isinstance(eager, (int, bool)) and not eager


def layer_attention_backward_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, forward_s, tp=1, frozen=0):
    """The attention core's backward: a fused kernel's four products (twice the forward's
    FLOPs) at the backward efficiency measured at length s (attention_bwd_efficiency_by_seq),
    whatever is frozen (attention has no weights: dQ, dK and dV are always computed); where
    not measured, (2 - frozen) x its forward's time `forward_s`, as the rest of the layer."""
    if not (c.attention_bwd_efficiency_by_seq and _fused(eager)):
        return (2 - frozen) * forward_s
    cost = opc.attention(b, s, m.num_heads, m.num_kv_heads, m.head_dim, e, "bwd")
    return attention_time_s(c, cost.flops / tp, cost.bytes / tp, s, backward=True)


def layer_elementwise_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1, kernels=1, sp=0):
    """Norms, RoPE, SwiGLU and residual adds: bandwidth-bound. Norms and adds act on the
    whole hidden state on every TP rank, or under sequence parallelism (`sp` 1) on the rank's
    1/tp of the tokens (Korthikanti et al., arXiv 2205.05198, section 4.2.2: "the layer-norm
    and dropout ... independent along the sequence dimension"); RoPE and SwiGLU on the rank's
    heads and columns.
    `kernels` an index into op_costs.KERNELS: fused (1) moves each module's tensors once; eager
    (0) each of its operators' (op_costs.rmsnorm_eager_bytes, rope_eager_bytes,
    swiglu_eager_bytes; a GPT layer's LayerNorm and GELU are one operator each either way). A
    device whose `bench ops` measured its element-wise operators prices them as measured: that
    efficiency is the eager modules' time against the fused bytes already."""
    h = m.hidden_size
    eager = (kernels == 0) * (not c.memory_efficiency_by_tokens) * (m.model_type != "gpt")
    norm = opc.rmsnorm(tokens, h, e).bytes
    rope = opc.rope(tokens, m.q_dim, m.kv_dim, m.head_dim, e).bytes
    act = opc.mlp_activation(tokens, m.mlp_token_width, e, m.gated_mlp).bytes
    norm = norm + eager * (opc.rmsnorm_eager_bytes(tokens, h, e) - norm)
    rope = rope + eager * (opc.rope_eager_bytes(tokens, m.q_dim, m.kv_dim, e) - rope)
    act = act + eager * m.gated_mlp * (opc.swiglu_eager_bytes(tokens, m.mlp_token_width, e) - act)
    replicated = (2 * norm + 2 * opc.residual_add(tokens, h, e).bytes) / (1 + sp * (tp - 1))
    sharded = rope + act
    # a MoE layer's routing, dispatch and combine (the mean over the model's layers)
    routing = m.moe_layers / m.num_layers * opc.moe_routing(tokens, m.experts_per_token, h, m.num_experts, e).bytes
    return memory_time_s(c, replicated + sharded / tp + routing, tokens)


def layer_op_recompute_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, weight_bytes, tp=1, kernels=1, sp=0):
    """What "op" selective recomputation redoes per layer in backward: the GEMMs it does not
    save (op_policy_gemms), the element-wise operators, and eager attention's core (a fused
    attention's outputs are saved); each operator at its fixed cost too."""
    tokens = b * s
    shapes = layer_gemm_shapes(m)
    weights = sum(k * n for k, n in shapes)
    _, redone = op_policy_gemms(m)
    gemms = sum(gemm_time_s(c, opc.linear_flops(tokens, k, n) / tp, weight_bytes * k * n / weights / tp + io,
                            (tokens, k, n / tp), io)
                for k, n, _ in redone for io in [opc.linear_io_bytes(tokens, k, n, e) / tp])
    ops = len(opc.LAYER_FORWARD_OPS) - len(shapes) + len(redone) - (1 - eager)  # the saved ones are not rerun
    total = (gemms + layer_elementwise_time_s(c, m, tokens, e, tp, kernels, sp)
             + eager * layer_attention_time_s(c, m, b, s, e, eager, tp))
    return launch_bound(c, total, ops)


ROW_PARALLEL = ("o_proj", "down_proj")
"""The projections whose input, not output, tensor parallelism splits."""


def layer_adapter_time_s(c: Ceilings, m: ModelSpec, tokens, e, rank, targets, dropout=0, tp=1, passes="fwd"):
    """One layer's LoRA adapter paths (op_costs.lora_adapter), one per resolved target in
    `targets`, each at its roofline: rank-r products move [T, k] and [T, n] activations for
    few FLOPs, so they run at the memory bandwidth. Under TP a column-parallel projection
    keeps its whole input and 1/tp of its output, a row-parallel one (o, down) the reverse."""
    shapes = wt.layer_linear_shapes(m, moe_layer=False)
    total = 0.0
    for t in targets:
        if t == wt.EXPERTS_TARGET:  # merged into the expert weights each pass, in the MoE layers only
            for n, k in wt.expert_lora_shapes(m):
                cost = opc.lora_expert_adapter(m.num_experts, n, k, rank, e, passes)
                total = total + m.moe_layers / m.num_layers * op_time_s(cost.flops, cost.bytes,
                                                                        c.gemm_flops_per_s(), c.bytes_per_s())
            continue
        n, k = shapes[t]
        k, n = (k / tp, n) if t in ROW_PARALLEL else (k, n / tp)
        cost = opc.lora_adapter(tokens, k, n, rank, e, passes, dropout)
        total = total + op_time_s(cost.flops, cost.bytes, c.gemm_flops_per_s(), c.bytes_per_s())
    return total


def launch_bound(c: Ceilings, kernels_s, ops, extra_fixed_s=0.0):
    """A run of `ops` operators whose kernels take `kernels_s` in all, each costing the fixed
    `op_fixed_s` to launch (plus `extra_fixed_s` of host work: a KV cache's update): on a CPU
    the sum (the calling thread does both); on a GPU the longer of the two, as the host queues
    kernels while earlier ones run (a layer of small kernels is launch-bound, a layer of large
    ones hides its launches)."""
    fixed = ops * c.op_fixed_s + extra_fixed_s
    if c.asynchronous:
        return kernels_s + (fixed - kernels_s) * (fixed > kernels_s)
    return kernels_s + fixed


FORWARD_FIXED_COSTS = ("op_fixed_s", "cache_update_s", "forward_fixed_s", "generate_step_s", "generate_call_s",
                       "serve_engine_step_s", "serve_engine_layer_s", "serve_engine_seq_s")
"""The fixed costs an inference forward (and the loop around it) pays, all measured on the
probe model with its objects in the caches (micro.overhead, micro.serve_engine)."""


def cold_cache_scale(c: Ceilings, streamed_bytes):
    """How much an inference forward's fixed costs grow because its kernels stream
    `streamed_bytes` (its weights and KV cache) through the host's caches: each layer's Python
    objects, dispatch tables and small tensors are touched once a forward, so they are found
    again only if fewer bytes than the last-level cache passed in between (a reference's reuse
    distance against the cache's size: Mattson et al., "Evaluation techniques for storage
    hierarchies", IBM Systems Journal 9(2), 1970). A real cache is not LRU (the probe's layer
    slows from 8-16 MiB streamed on this VM's 32 MiB, and keeps slowing past 32), so the scale is
    linear between the two conditions `peak` measured: the probe's hot cost (nothing streamed)
    and its cold one (`op_fixed_cold_s`, after a read of twice the cache), no colder beyond.
    1 on a GPU (its kernels stream device memory) and where the cold cost or the cache was
    not measured."""
    if c.asynchronous or not c.op_fixed_s or c.op_fixed_cold_s <= c.op_fixed_s or not c.cache_bytes:
        return 1.0
    share = vmin(streamed_bytes / (2 * c.cache_bytes), 1.0)
    return 1 + (c.op_fixed_cold_s / c.op_fixed_s - 1) * share


def forward_stream_bytes(m: ModelSpec, layer_weights, e, tp, kv_bytes):
    """What one inference forward streams through the caches on one device: every layer's
    weights as read (`layer_weights`: a MoE step's reached experts only, as its caller counts
    them), the output head and the KV cache's `kv_bytes`."""
    return (m.num_layers * layer_weights + m.vocab_size * m.hidden_size * e) / tp + kv_bytes


def with_cold_caches(c: Ceilings, streamed_bytes) -> Ceilings:
    """`c` with FORWARD_FIXED_COSTS scaled by cold_cache_scale(c, streamed_bytes)."""
    scale = cold_cache_scale(c, streamed_bytes)
    if isinstance(scale, float) and scale == 1.0:
        return c
    return replace(c, **{k: getattr(c, k) * scale for k in FORWARD_FIXED_COSTS})


def layer_kernels_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, weight_bytes, tp=1, by_length=False,
                         kernels=1, sp=0):
    """One layer's forward kernels: GEMMs + attention core + element-wise operators, each at
    its roofline (no fixed costs); `by_length` as layer_attention_time_s, `kernels` and `sp` as
    layer_elementwise_time_s."""
    tokens = b * s
    return (layer_gemm_time_s(c, m, tokens, e, weight_bytes, tp)
            + layer_attention_time_s(c, m, b, s, e, eager, tp, by_length)
            + layer_elementwise_time_s(c, m, tokens, e, tp, kernels, sp))


def layer_forward_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, weight_bytes, tp=1, by_length=False,
                         with_cache=False):
    """One layer's forward: its kernels and the fixed cost of each of its operators (launch_bound);
    `with_cache`: an inference forward, which also updates the layer's KV cache (`cache_update_s`)."""
    return launch_bound(c, layer_kernels_time_s(c, m, b, s, e, eager, weight_bytes, tp, by_length),
                        opc.layer_forward_ops(m), c.cache_update_s * with_cache)


def head_forward_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1, with_loss=1, loss=0, bwd_gemms=0, head=0):
    """Output head (vocabulary-parallel under TP) and, in training, the loss's forward pass
    over the fp32 logits; plus what a forward pays outside its layers (`forward_fixed_s`) and
    the loss's fixed costs. `loss` an index into op_costs.LOSSES: chunked runs the head and
    the loss on LOSS_CHUNKS slices of the tokens (each product re-reads the head's weights,
    each chunk's loss pays its own fixed costs); fused runs, chunk by chunk, the head, one
    pass that reads the 16-bit logits and writes their gradient in place, and the backward's
    `bwd_gemms` products (dX, and dW where the head trains), all in the forward (Liger's
    FusedLinearCrossEntropy, arXiv 2410.10989 sec. 3.2). `head` an index into op_costs.HEADS:
    under TP the products and the loss are sharded or whole as it says."""
    chunks = 1 + (loss == 1) * (opc.LOSS_CHUNKS - 1)
    tp_products, tp_loss = opc.head_shards(head, tp)
    ce = opc.cross_entropy(tokens, m.vocab_size, "fwd").bytes
    loss_bytes = with_loss * (ce + (loss == 2) * (2 * e * tokens * m.vocab_size - ce)) / tp_loss
    fixed = c.forward_fixed_s + with_loss * chunks * 2 * len(opc.LOSS_OPS) * c.op_fixed_s
    products = chunks * _head_gemm_time_s(c, m, tokens / chunks, e, tp_products) \
        + (loss == 2) * bwd_gemms * _head_gemm_time_s(c, m, tokens, e, tp_products)
    return products + memory_time_s(c, loss_bytes) + fixed


def head_backward_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1, gemms=2, loss=0, head=0):
    """The backward of the head and loss: the loss's backward pass (dlogits), then `gemms`
    products of the head's size (dX, and dW where the head trains: 1 under LoRA), each
    paying the forward's fixed costs again (backward_time's convention for the layers);
    chunked as head_forward_time_s, chunk by chunk. fused: its products ran in the forward;
    what is left scales the saved input gradient (a read and a write of b s h)."""
    chunks = 1 + (loss == 1) * (opc.LOSS_CHUNKS - 1)
    tp_products, tp_loss = opc.head_shards(head, tp)
    ce = opc.cross_entropy(tokens, m.vocab_size, "bwd").bytes / tp_loss
    fixed = c.forward_fixed_s + chunks * 2 * len(opc.LOSS_OPS) * c.op_fixed_s
    unfused = gemms * (chunks * _head_gemm_time_s(c, m, tokens / chunks, e, tp_products) + fixed) \
        + memory_time_s(c, ce)
    fused = memory_time_s(c, 2 * tokens * m.hidden_size * e) + c.op_fixed_s
    return unfused + (loss == 2) * (fused - unfused)


def _head_gemm_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1):
    head = opc.linear(tokens, m.hidden_size, m.vocab_size, e)
    io = opc.linear_io_bytes(tokens, m.hidden_size, m.vocab_size, e) / tp
    return gemm_time_s(c, head.flops / tp, head.bytes / tp, (tokens, m.hidden_size, m.vocab_size / tp), io)
