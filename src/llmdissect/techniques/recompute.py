"""Activation recomputation (gradient checkpointing) as a toggle.

- full: every decoder layer keeps only its input and recomputes the rest in backward
  (transformers' gradient checkpointing, non-reentrant).
- selective: only the attention core (scores, softmax, x V) is recomputed, as Megatron's
  selective recomputation does (Korthikanti et al., arXiv 2205.05198): its s x s
  activations dominate memory while it costs few FLOPs (4 L d_attn s per token). It is a
  registered transformers attention implementation that checkpoints the chosen one.
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
