"""Activation recomputation (gradient checkpointing) as a toggle.

- full: every decoder layer keeps only its input and recomputes the rest in backward
  (transformers' gradient checkpointing, non-reentrant).
- selective: only the attention core (scores, softmax, x V) is recomputed, as Megatron's
  selective recomputation does (Korthikanti et al., arXiv 2205.05198): its s x s
  activations dominate memory while it costs few FLOPs (4 L d_attn s per token). It is a
  registered transformers attention implementation that checkpoints the chosen one.
- op: torchtitan's per-operator selective policy (torchtitan parallelize_llama.py,
  `_custom_policy`): each decoder layer is checkpointed, but the outputs of its matmuls,
  every second one excepted, and of the fused attention kernel are saved; the rest
  (norms, RoPE, the activation, the other matmuls) is recomputed in backward.
"""
from __future__ import annotations

from typing import Any


def decoder_layers(model: Any) -> list[Any]:
    """The decoder layers of a (possibly peft-wrapped) Llama-family causal LM."""
    base = model
    for attr in ("base_model", "model"):
        while hasattr(base, attr) and not hasattr(base, "layers"):
            base = getattr(base, attr)
    if not hasattr(base, "layers"):
        raise ValueError(f"cannot find decoder layers in {type(model).__name__}")
    return list(base.layers)


def apply_recompute(model: Any, mode: str) -> None:
    if mode == "none":
        return
    if mode == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()  # frozen embeddings (LoRA) still need grads to flow
        return
    if mode == "op":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False,
                                                                           "context_fn": op_policy_context})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
        return
    if mode == "selective":
        config = model.config
        config._attn_implementation = selective_attention(config._attn_implementation)
        return
    raise ValueError(f"unknown recompute mode {mode!r}")


def selective_attention(base: str) -> str:
    """Register (once) an attention implementation that recomputes `base`'s core in
    backward, with `base`'s mask format; returns its name."""
    from torch.utils.checkpoint import checkpoint
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    name = f"llmdissect-selective-{base}"
    core = eager_attention_forward if base == "eager" else ALL_ATTENTION_FUNCTIONS[base]

    def recomputed(module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
        return checkpoint(core, module, query, key, value, mask, use_reentrant=False, **kwargs)

    AttentionInterface.register(name, recomputed)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    return name


def _saved_ops() -> set:
    """The operators whose outputs the op policy saves: matmuls and the fused attention
    kernels (CUDA's flash and memory-efficient ones, the CPU's flash)."""
    import torch

    aten = torch.ops.aten
    names = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention")
    return {aten.mm.default, *(getattr(aten, n).default for n in names if hasattr(aten, n))}


def op_policy_context():
    """One checkpointed layer's policy contexts: a fresh matmul count for its forward and
    for its recomputation, so both save the same outputs."""
    from collections import defaultdict

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved, counts, mm = _saved_ops(), defaultdict(int), torch.ops.aten.mm.default

    def policy(ctx, func, *args, **kwargs):
        key = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            counts[key] += 1
        keep = func in saved and not (func == mm and counts[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)
