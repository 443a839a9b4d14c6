"""Activation recomputation (gradient checkpointing) as a toggle.

- full: every decoder layer keeps only its input and recomputes the rest in backward
  (transformers' gradient checkpointing, non-reentrant).
- selective: only each attention block (projections, RoPE, scores, softmax, x V) is
  recomputed, the MLP keeps its activations: the spirit of Megatron's selective
  recomputation (Korthikanti et al., arXiv 2205.05198), which recomputes the attention core
  whose s x s activations dominate memory while costing few FLOPs.
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
        from torch.utils.checkpoint import checkpoint

        for layer in decoder_layers(model):
            attn = layer.self_attn
            forward = attn.forward

            def recomputed(*args: Any, _forward=forward, **kwargs: Any) -> Any:
                return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

            attn.forward = recomputed
        return
    raise ValueError(f"unknown recompute mode {mode!r}")
