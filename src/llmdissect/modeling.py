"""Build transformers models from specs: random weights, fixed seed, no downloads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmdissect.dtypes import torch_dtype
from llmdissect.errors import UserError
from llmdissect.specs.models import ModelSpec

ATTN_IMPLS = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}
EAGER_ONLY_TYPES = ("gpt_oss",)
"""transformers' gpt-oss runs only its eager attention (its attention sinks have no sdpa path)."""


def check_attn(attn: str, device: str = "cpu") -> str:
    """The transformers attention implementation for `--attn`, or a UserError where none runs."""
    if attn not in ATTN_IMPLS:
        raise UserError(f"unknown attention {attn!r}; choose one of {', '.join(ATTN_IMPLS)}")
    if attn == "flash":
        if not str(device).startswith("cuda"):
            raise UserError("--attn flash needs a CUDA GPU with the flash-attn package; use sdpa on this device")
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None:
            raise UserError("--attn flash needs the flash-attn package, which is not installed")
    return ATTN_IMPLS[attn]


def build_model(spec: ModelSpec, *, dtype: str = "fp32", attn: str = "sdpa", device: str = "cpu",
                seed: int = 0, meta: bool = False) -> Any:
    """A causal-LM of `spec` with random weights drawn from `seed` (on the meta device when
    `meta`, which allocates nothing)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = spec.hf_config()
    if spec.model_type in EAGER_ONLY_TYPES and attn != "eager":
        if not meta:
            raise UserError(f"model {spec.name!r} ({spec.model_type}) runs only with --attn eager in transformers")
        attn = "eager"
    config._attn_implementation = check_attn(attn, device) if not meta else ATTN_IMPLS.get(attn, "sdpa")
    if meta:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype))
    return model.to(device)


def write_model_folder(spec: ModelSpec, folder: Path, *, dtype: str = "fp32", seed: int = 0) -> Path:
    """Save a random-weight model of `spec` as a Hugging Face folder (config + safetensors)."""
    model = build_model(spec, dtype=dtype, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    meta = folder / "llmdissect.json"
    meta.write_text(json.dumps({"spec": spec.to_dict(), "seed": seed, "dtype": dtype}, indent=2))
    return folder
