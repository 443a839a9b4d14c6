"""How each supported transformers family spells its shapes in `config.json`, both ways.

The dense Llama family (llama, mistral) is the base; the others add to it:
- mixture of experts: mixtral, qwen3_moe, olmoe, gpt_oss, deepseek_v3 (routed experts of
  width `expert_intermediate_size`, `experts_per_token` of them per token; DeepSeek also has
  shared experts and dense first layers);
- multi-head latent attention (MLA, DeepSeek-V2/V3): low-rank q and kv projections;
- sliding-window layers: gemma3_text (5 local : 1 global), gpt_oss (alternating);
- per-head q/k RMSNorm: qwen3, qwen3_moe, gemma3_text (per head), olmoe (whole width);
- biases on q, k and v but not on o: qwen2 (Qwen2 and Qwen2.5), always.
"""
from __future__ import annotations

from typing import Any

MOE_TYPES = ("mixtral", "qwen3_moe", "olmoe", "gpt_oss", "deepseek_v3")
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM",
                 "gemma3_text": "Gemma3ForCausalLM", "mixtral": "MixtralForCausalLM",
                 "qwen3_moe": "Qwen3MoeForCausalLM", "olmoe": "OlmoeForCausalLM", "gpt_oss": "GptOssForCausalLM",
                 "deepseek_v3": "DeepseekV3ForCausalLM"}
QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "gemma3_text": "head", "olmoe": "width"}
"""Where q_norm/k_norm apply: one weight of head_dim ("head") or of the whole q/kv width."""
QKV_BIAS_ONLY = ("qwen2",)
"""Families whose q, k and v projections carry biases and whose o projection does not."""
NORMS_PER_LAYER = {"gemma3_text": 4}
"""RMSNorms around attention and MLP: Gemma 3 adds pre- and post-feedforward norms."""


def _experts(cfg: dict[str, Any]) -> int:
    return int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)


def moe_fields(model_type: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The spec's MoE, MLA and sliding-window fields from a config.json dict."""
    out: dict[str, Any] = {}
    if model_type in MOE_TYPES:
        out["num_experts"] = _experts(cfg)
        out["experts_per_token"] = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0)
        width = cfg.get("moe_intermediate_size") if model_type in ("qwen3_moe", "deepseek_v3") else None
        out["expert_intermediate_size"] = int(width or cfg["intermediate_size"])
        if model_type == "qwen3_moe" and (cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step", 1)) != 1):
            raise ValueError("qwen3_moe with mlp_only_layers or decoder_sparse_step != 1 is not supported")
    if model_type == "deepseek_v3":
        if int(cfg.get("moe_layer_freq", 1)) != 1:
            raise ValueError("deepseek_v3 with moe_layer_freq != 1 is not supported")
        out.update(num_shared_experts=int(cfg.get("n_shared_experts") or 0),
                   first_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
                   q_lora_rank=int(cfg.get("q_lora_rank") or 0), kv_lora_rank=int(cfg["kv_lora_rank"]),
                   qk_nope_head_dim=int(cfg["qk_nope_head_dim"]), qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
                   v_head_dim=int(cfg["v_head_dim"]))
    types = cfg.get("layer_types")
    if model_type in ("gemma3_text", "gpt_oss") and cfg.get("sliding_window"):
        if types:
            out["sliding_window_pattern"] = _pattern_of(types)
        else:
            out["sliding_window_pattern"] = int(cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern")
                                                or (6 if model_type == "gemma3_text" else 2))
    return out


def _pattern_of(types: list[str]) -> int:
    """p such that layer i is global exactly when (i + 1) % p == 0 (0: every layer local)."""
    glob = [i for i, t in enumerate(types) if t == "full_attention"]
    if not glob:
        return 0
    p = glob[0] + 1
    if [i for i in range(len(types)) if (i + 1) % p == 0] != glob:
        raise ValueError("layer_types is not a regular local:global pattern")
    return p


def layer_types(num_layers: int, pattern: int) -> list[str]:
    """transformers' `layer_types` for a local:global pattern."""
    return ["full_attention" if pattern and (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)]


def hf_extra_fields(spec) -> dict[str, Any]:
    """The family-specific keys of the equivalent config.json (spec: a ModelSpec)."""
    t, d = spec.model_type, {}
    if t in ("mixtral", "gpt_oss"):
        d.update(num_local_experts=spec.num_experts, num_experts_per_tok=spec.experts_per_token)
    if t in ("qwen3_moe", "olmoe"):
        d.update(num_experts=spec.num_experts, num_experts_per_tok=spec.experts_per_token)
    if t == "qwen3_moe":
        d.update(moe_intermediate_size=spec.expert_intermediate_size, norm_topk_prob=True)
    if t == "deepseek_v3":
        d.update(n_routed_experts=spec.num_experts, num_experts_per_tok=spec.experts_per_token,
                 moe_intermediate_size=spec.expert_intermediate_size, n_shared_experts=spec.num_shared_experts,
                 first_k_dense_replace=spec.first_dense_layers, q_lora_rank=spec.q_lora_rank or None,
                 kv_lora_rank=spec.kv_lora_rank, qk_nope_head_dim=spec.qk_nope_head_dim,
                 qk_rope_head_dim=spec.qk_rope_head_dim, v_head_dim=spec.v_head_dim,
                 head_dim=spec.qk_rope_head_dim, n_group=1, topk_group=1, num_key_value_heads=spec.num_heads)
    if t == "gpt_oss":
        d.update(experts_per_token=spec.experts_per_token, attention_bias=True)
    if t == "gemma3_text":
        d.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=spec.head_dim)
    if t in ("gemma3_text", "gpt_oss") and spec.sliding_window:
        d["layer_types"] = layer_types(spec.num_layers, spec.sliding_window_pattern)
    if t in ("qwen3", "qwen3_moe"):
        d.update(attention_bias=False)
    if t == "qwen2" and not spec.sliding_window:
        d.update(use_sliding_window=False)
    return d
