"""Techniques: small toggles applied to a model (quantization, attention, recompute, LoRA, ...)."""
