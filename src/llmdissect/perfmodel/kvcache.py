"""KV-cache bytes and the inference-time working set.

transformers' DynamicCache keeps, per layer, a key and a value tensor of shape
(batch, kv_heads, positions, head_dim) in the compute dtype: grouped-query attention stores
kv_heads, not heads (Ainslie et al., arXiv 2305.13245). After generating `output_len` tokens
from `input_len`, the cache holds input_len + output_len - 1 positions (the last token is
never fed back).
"""
from __future__ import annotations

from llmdissect.specs.models import ModelSpec


def kv_bytes_per_token(m: ModelSpec, e):
    """One position of one sequence: 2 (K and V) x L x d_kv x e."""
    return 2 * m.num_layers * m.kv_dim * e


def kv_cache_bytes(m: ModelSpec, batch, positions, e, tp=1):
    """The whole cache on one device: tensor parallelism splits the kv heads over tp."""
    return batch * positions * kv_bytes_per_token(m, e) / tp


def generate_positions(input_len, output_len):
    """Positions the cache holds at the end of generate."""
    return input_len + output_len - 1


def prefill_working_bytes(m: ModelSpec, batch, seq, e, eager, tp=1):
    """The largest set of activations alive at once in a no-grad prefill of one layer: the
    residual and normed input (2 b s h), q/k/v (b s (d_q + 2 d_kv)), eager scores in fp32
    (b a s^2), and the MLP's gate, up and product (3 b s f); plus the last position's fp32
    logits (b V), the only ones generate computes."""
    attention = batch * seq * (m.q_dim + 2 * m.kv_dim) * e / tp + eager * batch * m.num_heads * seq * seq * 4 / tp
    mlp = 3 * batch * seq * m.intermediate_size * e / tp
    residual = 2 * batch * seq * m.hidden_size * e
    larger = attention + (mlp - attention) * (mlp > attention)
    return residual + larger + batch * m.vocab_size * 4
