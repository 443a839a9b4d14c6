"""Activation bytes of a Llama decoder, tensor by tensor, as transformers' Llama saves them.

Derived from the autograd graph of `LlamaDecoderLayer` (transformers 5) and checked against
the live tensors of real training steps (tests/unit/test_perfmodel_activations.py). With b
micro-batch, s sequence, h hidden, f intermediate, a heads, e bytes of the compute dtype,
d_q = a x head_dim and d_kv = kv_heads x head_dim, one layer keeps for backward:

- residual stream: the mid-layer and output residuals, 2 b s h e, in fp32 only: the next
  RMSNorm saves its input for backward, and in bf16/fp16 that input is the norm's own fp32
  copy, so the residual itself is freed (its input is the previous layer's output, or the
  embedding output for the first layer);
- each of the two RMSNorms: its input in fp32 (a copy only when e < 4), the normalized
  tensor and its output: 8 b s h bytes for fp32 and bf16 alike, plus rsqrt (b s, fp32);
- attention inputs after RoPE: q, k, v, b s (d_q + 2 d_kv) e (RoPE multiplies by constant
  cos/sin, so it saves nothing of its own); eager attention with kv_heads < heads saves
  instead of k and v their copies repeated to every query head, 2 b s d_q e;
- eager attention: the softmax output b a s^2 in fp32 (plus a cast copy when e < 4), and
  the contiguous attention output b s d_q e;
- SDPA / FlashAttention (grouped-query aware, no repeated copies): the output b s d_q e
  and the log-sum-exp b a s (fp32); no s x s buffer (Dao et al., arXiv 2205.14135);
- SwiGLU MLP: gate, silu(gate), up and their product, 4 b s f e. No dropout anywhere.

Tensor parallelism (Megatron, Korthikanti et al. arXiv 2205.05198) splits the attention and
MLP tensors over `tp`; norms and residuals stay whole, or hold 1/tp of the tokens under
sequence parallelism (`sp`, the same paper's section 4.2.2).
Selective recomputation drops the s x s softmax output; full recomputation keeps only each
layer's input and rebuilds one layer at a time in backward; "op" (torchtitan's per-operator
policy, layertime.op_policy_gemms) keeps the layer's input, every other GEMM's output and the
fused attention's outputs, and rebuilds the rest one layer at a time. Functions take scalars or numpy
arrays; `eager` and flags are 0/1.
"""
from __future__ import annotations

from llmdissect.perfmodel import moe
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.layertime import ROW_PARALLEL, op_policy_gemms
from llmdissect.perfmodel.op_costs import DROPOUT_MASK_BYTES, LOSS_CHUNKS, head_shards
from llmdissect.specs.families import QK_NORM
from llmdissect.specs.models import ModelSpec

RECOMPUTES = ("none", "selective", "full", "op")
RECOMPUTE_LEVEL = {"none": 0, "selective": 1, "full": 2, "op": 3}
"""The numbers the arithmetic takes (flags like `level == 2` work on advise's arrays)."""
ATTNS = ("eager", "sdpa", "flash", "flash3")
"""flash3: FlashAttention-3 (Hopper only; estimate only): flash's memory, its own rate
(defaults.FLASH3_ATTENTION_EFFICIENCY)."""
HELD_LOGITS = ("none", "compute", "fp32")
"""What of the logits the training loop keeps alive through backward (`--held-logits`): none,
where it keeps only the loss (`loss = model(**batch).loss`, as transformers' Trainer, torchtune
and bench do); compute, where it keeps the model output (`output = model(**batch)`, dropped
after the step) and the output's logits are in the compute dtype (transformers 4.45 and later);
fp32, the same loop under transformers 4.31-4.44, whose LlamaForCausalLM upcast the logits in
its forward (`logits = logits.float()` after the head, v4.38.0 modeling_llama.py), so the
output holds them in fp32 (AnswerDotAI fsdp_qlora's train.py, `output = None` after the step)."""


def residual_bytes_per_layer(m: ModelSpec, b, s, e):
    """Mid-layer and output residuals: 2 b s h e, kept only in fp32 (see the module docstring)."""
    return 2 * b * s * m.hidden_size * e * (e >= 4)


def rmsnorm_bytes(m: ModelSpec, b, s, e):
    """One RMSNorm: fp32 input copy (when e < 4), normalized tensor and output, rsqrt (fp32)."""
    per_element = 2 * e + (e < 4) * 4
    return b * s * m.hidden_size * per_element + b * s * 4


def qkv_bytes(m: ModelSpec, b, s, e, tp=1, eager=0):
    """q, k, v after RoPE: b s (d_q + 2 d_kv) e / tp; eager attention under grouped-query
    attention keeps k and v repeated to d_q wide instead (`repeat_kv` copies them)."""
    kv_width = m.kv_dim + (m.num_heads > m.num_kv_heads) * eager * (m.q_dim - m.kv_dim)
    return b * s * (m.q_dim + 2 * kv_width) * e / tp + qk_norm_bytes(m, b, s, e, tp)


def qk_norm_bytes(m: ModelSpec, b, s, e, tp=1):
    """Qwen3, Gemma 3, OLMoE normalise q and k before RoPE: the norms keep their inputs,
    b s (d_q + d_kv) e / tp more (0 for families without q/k norms)."""
    return (m.model_type in QK_NORM) * b * s * (m.q_dim + m.kv_dim) * e / tp


def eager_attention_bytes(m: ModelSpec, b, s, e, tp=1, keep_scores=1):
    """Eager attention: softmax output (fp32 + a cast copy when e < 4), contiguous output."""
    scores = keep_scores * b * m.num_heads * s * s * (4 + (e < 4) * e)
    return (scores + b * s * m.q_dim * e) / tp


def fused_attention_bytes(m: ModelSpec, b, s, e, tp=1):
    """SDPA / FlashAttention: the output and the fp32 log-sum-exp per row and head."""
    return (b * s * m.q_dim * e + b * m.num_heads * s * 4) / tp


def mlp_bytes(m: ModelSpec, b, s, e, tp=1):
    """SwiGLU: gate, silu(gate), up and silu(gate) * up, 4 b s f e / tp. GPT's GELU MLP: the
    GELU's input and the second matmul's input, 2 b s f e / tp (Korthikanti et al., arXiv
    2205.05198, section 4.1: 8 sbh + 8 sbh at f = 4h, 2 bytes an element). A MoE layer's f
    is the token's k experts and the shared ones (dropless routing: every routed token kept,
    as transformers runs it), plus what routing saves (moe.routing_activation_bytes)."""
    gated = (4 if m.gated_mlp else 2) * b * s * m.mlp_token_width * e / tp
    return gated + moe.routing_activation_bytes(m, b, s, e)


def layer_activation_bytes(m: ModelSpec, b, s, e, eager, tp=1, selective=0, sp=0):
    """Everything one decoder layer saves for backward (no full recomputation); under sequence
    parallelism (`sp` 1) the norms and residuals hold 1/tp of the tokens."""
    attention = (eager * eager_attention_bytes(m, b, s, e, tp, keep_scores=1 - selective)
                 + (1 - eager) * fused_attention_bytes(m, b, s, e, tp))
    whole = (residual_bytes_per_layer(m, b, s, e) + 2 * rmsnorm_bytes(m, b, s, e)) / (1 + sp * (tp - 1))
    return whole + qkv_bytes(m, b, s, e, tp, eager) + attention + mlp_bytes(m, b, s, e, tp)


NORM1_READERS = ("q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa")
"""The projections that read the attention's RMSNorm output (MLA's first ones included)."""
NORM2_READERS = ("gate_proj", "up_proj")


def lora_layer_delta_bytes(m: ModelSpec, b, s, e, targets=(), rank=0, dropout=0, tp=1):
    """What a LoRA layer saves beyond (or below) `layer_activation_bytes`, as autograd keeps
    only what a gradient it needs reads: the base weights and the norms' weights are frozen.

    - Each RMSNorm's normalized tensor is saved only for its weight's gradient: gone. Its
      output is saved only by the adapters that read it (q/k/v for the first norm, gate/up for
      the second; a frozen product keeps its weight, not its input): gone where none does.
    - The MLP's last product (down, fc2) keeps its input only with an adapter on it: f / tp
      gone otherwise (the SwiGLU's gate, silu(gate) and up stay: their own backward reads them).
      MoE layers keep their MLP terms (their experts' LoRA is another path).
    - Each adapter keeps its rank-r product, b s r e (lora_B's input), and with dropout on its
      input (`dropout` 1, PEFT) the dropped copy of its input, b s k e, and the 1-byte mask
      (CUDA's native dropout; a column-parallel projection's input is whole under TP, a row-
      parallel one's 1/tp); on its output (2, NeMo) the mask, b s n / tp. Nothing else:
      without dropout lora_A keeps the same input tensor the norm produced.
    Adapters are taken in the compute dtype (PEFT's default autocast keeps them in fp32 over a
    16-bit base, each then keeping an fp32 copy of its input: not modelled). The first
    layer's input needs no gradient (the embedding is frozen), so what it saves before its
    first adapter is saved by nothing: one layer's norm at most, left in.
    Checked against the live tensors of real PEFT steps (tests/unit/test_lora_activations.py).
    0 where `rank` is 0 (no LoRA); scalars or numpy arrays."""
    h, T = m.hidden_size, b * s
    shapes = wt.layer_linear_shapes(m, moe_layer=False)
    keeps_input = dropout != 1  # input dropout: each adapter keeps its own copy, not the norm's output
    read1 = any(t in NORM1_READERS for t in targets) * keeps_input
    read2 = (any(t in NORM2_READERS for t in targets) * keeps_input) if not m.is_moe else 1
    last_product = (("down_proj" in targets) * keeps_input) if not m.is_moe else 1
    delta = -2 * T * h * e - T * h * e * (1 - read1) - T * h * e * (1 - read2) \
        - T * m.mlp_token_width * e / tp * (1 - last_product)
    for t in targets:
        if t == wt.EXPERTS_TARGET:
            continue
        n, k = shapes[t]
        k, n = (k / tp, n) if t in ROW_PARALLEL else (k, n / tp)
        delta = delta + T * rank * e + (dropout == 1) * T * k * (e + DROPOUT_MASK_BYTES) \
            + (dropout == 2) * T * n * DROPOUT_MASK_BYTES
    return (rank > 0) * delta


def lora_final_norm_delta_bytes(m: ModelSpec, b, s, e, lora=0):
    """Under LoRA the final norm's normalized tensor and output are saved by nothing (the
    frozen head keeps its weight, not its input): 2 b s h e less."""
    return -lora * 2 * b * s * m.hidden_size * e


def checkpointed_layer_bytes(m: ModelSpec, b, s, e):
    """Full recomputation: a layer keeps only its output (the next layer's checkpointed input)."""
    return b * s * m.hidden_size * e


def op_policy_layer_bytes(m: ModelSpec, b, s, e, eager, tp=1):
    """"op" selective recomputation: the layer's input, the outputs of the GEMMs the policy
    saves (column-parallel ones split over tp), and a fused attention's output and
    log-sum-exp (eager attention's matmuls are batched, not saved: recomputed)."""
    saved, _ = op_policy_gemms(m)
    gemms = sum(b * s * n * e / (1 if row else tp) for _, n, row in saved)
    return checkpointed_layer_bytes(m, b, s, e) + gemms + (1 - eager) * fused_attention_bytes(m, b, s, e, tp)


def saved_layer_bytes(m: ModelSpec, b, s, e, eager, recompute_level, tp=1, sp=0):
    """Bytes a layer keeps until its backward: level 0 none, 1 selective, 2 full, 3 op. Under
    sequence parallelism (`sp` 1) the tensors every TP rank would hold whole (the layer's
    checkpointed input, the norms and residuals) hold 1/tp of the tokens (Korthikanti et al.,
    arXiv 2205.05198, section 4.2.2)."""
    full, op = (recompute_level == 2) * 1, (recompute_level == 3) * 1
    kept = layer_activation_bytes(m, b, s, e, eager, tp, selective=(recompute_level == 1) * 1, sp=sp)
    split_input = checkpointed_layer_bytes(m, b, s, e) * sp * (1 / tp - 1)
    return (full * (checkpointed_layer_bytes(m, b, s, e) + split_input)
            + op * (op_policy_layer_bytes(m, b, s, e, eager, tp) + split_input) + (1 - full - op) * kept)


def embedding_output_bytes(m: ModelSpec, b, s, e):
    """The embedding output, the first layer's input: kept only in fp32, like the residuals."""
    return b * s * m.hidden_size * e * (e >= 4)


def rope_table_bytes(m: ModelSpec, s, e):
    """cos and sin for the sequence, shared by every layer: 2 s head_dim e."""
    return 2 * s * m.head_dim * e


def logits_bytes(m: ModelSpec, b, s, e, loss=0):
    """What the loss keeps for backward (`loss` an index into LOSSES).

    unchunked: the fp32 log-softmax that NLL saves (transformers' ForCausalLMLoss upcasts the
    logits, and neither the logits nor the upcast are saved), and the shifted int64 labels.
    The logits themselves (b s V e) live on only while the caller holds the model output
    (`stepmemory.training_step_peak_bytes(held_bytes=...)`, HELD_LOGITS).
    chunked: every chunk's log-softmax is saved the same way (the chunks are upcast one at a
    time, but all are kept for backward): the same bytes.
    fused: the gradient of the head's input, computed chunk by chunk in the forward (Liger's
    FusedLinearCrossEntropy), b s h e; no logits outlive their chunk."""
    kept = b * s * m.vocab_size * 4 + b * s * 8
    return kept + (loss == 2) * (b * s * m.hidden_size * e - kept)


def held_logit_bytes(held, e):
    """Bytes an element of the logits the loop holds (`held` an index into HELD_LOGITS)."""
    return (held == 1) * e + (held == 2) * 4


def loss_transient_bytes(m: ModelSpec, b, s, e=4, loss=0):
    """What the loss holds at its worst moment beside what it keeps (`logits_bytes`).
    unchunked: in backward, the NLL gradient and the log-softmax gradient (fp32), 2 b s V 4.
    chunked: in the forward, the 16-bit logits of every chunk (the model returns them all) and
    one chunk's fp32 upcast; its backward runs one chunk's chain at a time (their nodes come
    last in autograd's ready queue), the two gradients over a chunk and the chunk's dlogits,
    less. fused: one chunk of logits in the compute dtype, which Liger's kernel overwrites
    with its gradient; its chunks have ceil(b s / ceil(V / h)) rows (to a power of two), so a
    chunk is about b s h elements."""
    whole = b * s * m.vocab_size
    chunked_fwd = whole * e + (e < 4) * whole * 4 / LOSS_CHUNKS
    chunked_bwd = (2 * whole * 4 + whole * e) / LOSS_CHUNKS
    chunked = chunked_fwd + (chunked_bwd - chunked_fwd) * (chunked_bwd > chunked_fwd)
    return (loss == 0) * 2 * whole * 4 + (loss == 1) * chunked + (loss == 2) * b * s * m.hidden_size * e


def layer_backward_extra_bytes(m: ModelSpec, b, s, e, eager, tp=1):
    """What one layer's backward adds on top of its saved activations, at its worst moment.

    Backward runs the MLP first: three b s f gradients live beside everything the layer
    saved. By the attention's turn the MLP's and second norm's saved tensors are freed, and
    eager attention holds the softmax gradient and its input gradient, 2 b a s^2 e. The
    residual gradient, b s h e, is alive throughout."""
    residual = b * s * m.hidden_size * e
    mlp_phase = (m.mlp_in_matrices + 1) * b * s * m.mlp_token_width * e / tp  # GPT: two b s f gradients
    attn_phase = (eager * 2 * b * m.num_heads * s * s * e / tp - mlp_bytes(m, b, s, e, tp)
                  - rmsnorm_bytes(m, b, s, e))
    return residual + mlp_phase + (attn_phase - mlp_phase) * (attn_phase > mlp_phase)


def eager_mask_bytes(m: ModelSpec, b, s, e, eager, recompute_level):
    """Eager attention builds a b x 1 x s x s additive mask; checkpointed layers keep it as an
    input until backward (otherwise it dies with the forward)."""
    return eager * (recompute_level >= 2) * b * s * s * e


def activation_bytes(m: ModelSpec, b, s, e, eager, recompute_level, tp=1, pp=1, pp_virtual=1, loss=0, sp=0,
                     head=0, lora=0, lora_delta=0):
    """What the forward leaves alive for backward on one device: saved tensors of its layers,
    embedding output, final norm and the loss's log-softmax. Under 1F1B pipeline parallelism
    the stage that holds the most: the first holds `pp` micro-batches of L / pp layers (arXiv
    2205.05198, sec. 4.2.3), i.e. L layers' worth, and no logits; the last one micro-batch of
    its L / pp layers and the loss's tensors; interleaved over `pp_virtual`
    chunks a device it holds v p + p - 1 chunks of L / (p v) layers in its warm-up (Megatron's
    schedule: 2 (p - 1) + (v - 1) p warm-up chunks, then one), L (1 + (p - 1) / (p v)) layers'
    worth (the same section's factor). The loss's tensors are split over the TP ranks where
    the head is vocabulary-parallel (`head` an index into op_costs.HEADS). Under LoRA (`lora`
    1) a kept layer saves `lora_delta` more (lora_layer_delta_bytes; a checkpointed one only its
    input) and the final norm less."""
    interleaved = (pp_virtual > 1) * (pp - 1) / (pp * pp_virtual)
    kept = saved_layer_bytes(m, b, s, e, eager, recompute_level, tp, sp) + (recompute_level < 2) * lora_delta
    edges = (embedding_output_bytes(m, b, s, e) + rmsnorm_bytes(m, b, s, e) + rope_table_bytes(m, s, e)
             + eager_mask_bytes(m, b, s, e, eager, recompute_level) + lora_final_norm_delta_bytes(m, b, s, e, lora))
    logits = logits_bytes(m, b, s, e, loss) / head_shards(head, tp)[1]
    first = m.num_layers * (1 + interleaved) * kept + edges + (pp == 1) * logits
    last = m.num_layers / pp * kept + edges + logits
    return first + (last - first) * (last > first)
