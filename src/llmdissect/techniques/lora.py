"""LoRA (Hu et al., arXiv 2106.09685) and QLoRA (Dettmers et al., arXiv 2305.14314) via PEFT.

QLoRA's base is quantized the way users do it: the random-weight model is saved to a
temporary folder and loaded back with a bitsandbytes NF4 config (double quantization on).
"""
from __future__ import annotations

import tempfile
from typing import Any


def quantized_nf4_base(model: Any, compute_dtype: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=compute_dtype)
    with tempfile.TemporaryDirectory(prefix="llmdissect-qlora-") as folder:
        model.save_pretrained(folder)
        attn = model.config._attn_implementation
        base = AutoModelForCausalLM.from_pretrained(folder, quantization_config=config, dtype=torch.float32,
                                                    attn_implementation=attn)
    from peft import prepare_model_for_kbit_training

    # Recomputation is our own toggle, applied afterwards; not peft's default.
    return prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)


def apply_lora(model: Any, method: str, rank: int, alpha: int, targets: list[str], compute_dtype: Any) -> Any:
    """A peft model whose only trainable parameters are the adapters."""
    from peft import LoraConfig, get_peft_model

    if method == "qlora":
        model = quantized_nf4_base(model, compute_dtype)
    from llmdissect.perfmodel.weights import EXPERTS_TARGET

    modules = [t for t in targets if t != EXPERTS_TARGET]
    # the routed experts are stacked 3-D parameters, not nn.Linear: PEFT adapts them by name
    params = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"] if EXPERTS_TARGET in targets else None
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=modules, target_parameters=params,
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)
