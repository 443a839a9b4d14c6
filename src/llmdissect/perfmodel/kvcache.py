"""KV-cache bytes and the inference-time working set.

transformers' DynamicCache keeps, per layer, a key and a value tensor of shape
(batch, kv_heads, positions, head_dim) in the compute dtype: grouped-query attention stores
kv_heads, not heads (Ainslie et al., arXiv 2305.13245). After generating `output_len` tokens
from `input_len`, the cache holds input_len + output_len - 1 positions (the last token is
never fed back). Latent attention (MLA) caches its compressed latent and rope key
(moe.mla_latent_values_per_position); sliding-window layers hold at most their window
(moe.cached_positions).
"""
from __future__ import annotations

from llmdissect.perfmodel import moe
from llmdissect.specs.models import ModelSpec


def kv_values_per_position_layer(m: ModelSpec):
    """Values one layer caches per position: K and V of the kv heads (2 d_kv); MLA its
    latent r_kv + d_r."""
    return moe.mla_latent_values_per_position(m) if m.is_mla else 2 * m.kv_dim


def kv_bytes_per_token(m: ModelSpec, e):
    """One position of one sequence in every layer: 2 (K and V) x L x d_kv x e (MLA:
    L (r_kv + d_r) e)."""
    return m.num_layers * kv_values_per_position_layer(m) * e


def kv_cache_bytes(m: ModelSpec, batch, positions, e, tp=1):
    """The whole cache on one device: tensor parallelism splits the kv heads over tp (MLA's
    one latent is not split: each rank holds it whole, Megatron and vLLM alike);
    sliding-window layers keep at most their window."""
    split = tp if not m.is_mla else 1
    return batch * moe.cached_positions(m, positions) * kv_values_per_position_layer(m) * e / split


CACHES = ("dynamic", "static")
"""bench infer's --cache: transformers' DynamicCache (concatenating) or StaticCache (in place)."""
CACHE_APPEND_PASSES = 2
"""transformers' DynamicCache appends a step's keys and values by `torch.cat` of the layer's
whole cache with them (cache_utils.DynamicLayer.update), so each decode step reads the
cache and writes it anew: two passes over its bytes, beside attention's own read."""


def cache_append_bytes(m: ModelSpec, batch, positions, e, tp=1):
    """Bytes one decode step moves to append to a concatenating cache of `positions` tokens
    (a static cache writes only the new token's, which is noise beside attention's read)."""
    return CACHE_APPEND_PASSES * kv_cache_bytes(m, batch, positions, e, tp)


def generate_positions(input_len, output_len):
    """Positions the cache holds at the end of generate."""
    return input_len + output_len - 1


def prefill_working_bytes(m: ModelSpec, batch, seq, e, eager, tp=1):
    """The activations alive at once in a no-grad prefill, at its peak (the MLP of a layer),
    as transformers' Llama holds them (checked against a real generate):

    - the residual stream, 4 b s h e: the embedding output (the model's forward keeps its
      local), the layer's input (its caller's loop variable), the mid-layer residual and the
      normalized input;
    - the larger of the attention inputs b s (d_q + 2 d_kv) e and the MLP's gate, up and
      product, 3 b s f e (each / tp);
    - eager attention: the layer keeps the returned fp32 attention weights b a s^2 until it
      returns, and the additive mask b s^2 e lives for the whole forward;
    - RoPE tables per sequence, 2 b s head_dim e; the last position's fp32 logits b V, the
      only ones generate computes.
    """
    residual = 4 * batch * seq * m.hidden_size * e
    attention = batch * seq * (m.q_dim + 2 * m.kv_dim) * e / tp
    mlp = (m.mlp_in_matrices + 1) * batch * seq * m.mlp_token_width * e / tp
    larger = attention + (mlp - attention) * (mlp > attention)
    eager_kept = eager * (batch * m.num_heads * seq * seq * 4 / tp + batch * seq * seq * e)
    rope = 2 * batch * seq * m.head_dim * e
    return residual + larger + eager_kept + rope + batch * m.vocab_size * 4
