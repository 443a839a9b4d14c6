"""Time of one decoder layer's forward, and of the output head, by the roofline.

One forward of T = b x s tokens through a layer on one of `tp` tensor-parallel devices
(shapes as perfmodel.flops; e bytes per activation element, `we` bytes per weight element):

- GEMMs (q/k/v, o, gate/up, down): 2 T x layer matmul weights / tp FLOPs, moving the
  weights once and each input and output once;
- attention core: 4 T s d_attn / tp FLOPs, halved by fused causal kernels (sdpa/flash skip
  the masked half; eager computes the full square and also writes and re-reads the
  b a s^2 scores: matmul out, mask add, softmax in and out, 4 passes);
- element-wise: two RMSNorms (read and write, plus the fp32 pass, ~4 T h e each), RoPE on
  q and k, SwiGLU (3 T f e), two residual adds (3 T h e each).

Scalars or numpy arrays throughout.
"""
from __future__ import annotations

from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel.roofline import Ceilings, attention_time_s, gemm_time_s, memory_time_s
from llmdissect.specs.models import ModelSpec


def layer_weight_elements(m: ModelSpec):
    """Matmul weights of one layer."""
    return m.params_attention_per_layer + m.params_mlp_per_layer


def layer_gemm_time_s(c: Ceilings, m: ModelSpec, tokens, e, weight_bytes, tp=1):
    """The layer's four GEMM groups; `weight_bytes` is the layer's (possibly quantized) weights."""
    h, f = m.hidden_size, m.intermediate_size
    flops = tokens * fl.layer_matmul_flops_fwd(m) / tp
    io = tokens * e * ((h + m.q_dim + 2 * m.kv_dim) + (m.q_dim + h) + (h + 2 * f) + (f + h)) / tp
    return gemm_time_s(c, flops, weight_bytes / tp + io)


def layer_attention_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, tp=1):
    """The attention core (scores, softmax, attention x V)."""
    tokens = b * s
    causal = 1 - 0.5 * (1 - eager)
    flops = tokens * fl.layer_attention_flops_fwd(m, s) * causal / tp
    io = tokens * (2 * m.q_dim + 2 * m.kv_dim) * e / tp
    scores = eager * 4 * b * m.num_heads * s * s * e / tp
    return attention_time_s(c, flops, io) + memory_time_s(c, scores)


def layer_elementwise_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1):
    """Norms, RoPE, SwiGLU and residual adds: bandwidth-bound."""
    h = m.hidden_size
    nbytes = tokens * e * (2 * 4 * h + 2 * 3 * h + (2 * (m.q_dim + m.kv_dim) + 3 * m.intermediate_size) / tp)
    return memory_time_s(c, nbytes)


def layer_forward_time_s(c: Ceilings, m: ModelSpec, b, s, e, eager, weight_bytes, tp=1):
    """One layer's forward: GEMMs + attention core + element-wise operators."""
    tokens = b * s
    return (layer_gemm_time_s(c, m, tokens, e, weight_bytes, tp) + layer_attention_time_s(c, m, b, s, e, eager, tp)
            + layer_elementwise_time_s(c, m, tokens, e, tp))


def head_forward_time_s(c: Ceilings, m: ModelSpec, tokens, e, tp=1, with_loss=1):
    """Output head (vocabulary-parallel under TP) and, in training, the fp32 loss passes."""
    flops = tokens * fl.head_flops_fwd(m) / tp
    nbytes = (m.params_head * e + tokens * (m.hidden_size + m.vocab_size) * e) / tp
    loss = with_loss * tokens * m.vocab_size * 12 / tp
    return gemm_time_s(c, flops, nbytes) + memory_time_s(c, loss)
