"""Model specs from files: the preset TOMLs (specs/data/models), a model TOML, or a Hugging
Face `config.json` (or a folder holding one) of a supported family (specs/families.py)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError
from llmdissect.specs import families as fam
from llmdissect.specs.models import ModelSpec
from llmdissect.specs.tomlfile import read_toml, require

_MOE_MLA_FIELDS = ("sliding_window_pattern", "num_experts", "experts_per_token", "expert_intermediate_size",
                   "num_shared_experts", "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                   "qk_rope_head_dim", "v_head_dim")

_TOML_FIELDS = {
    "hidden_size": int, "intermediate_size": int, "num_layers": int, "num_heads": int,
    "num_kv_heads": int, "vocab_size": int, "max_position_embeddings": int,
}


def _from_toml(path: Path) -> ModelSpec:
    data = read_toml(path)
    kwargs: dict[str, Any] = {"name": require(data, "name", str, path)}
    for key, kind in _TOML_FIELDS.items():
        kwargs[key] = require(data, key, kind, path)
    optional = {"model_type": str, "head_dim": int, "rms_norm_eps": (int, float), "rope_theta": (int, float),
                "tie_word_embeddings": bool, "attention_bias": bool, "mlp_bias": bool,
                "sliding_window": int, "description": str, "source_url": str, **{k: int for k in _MOE_MLA_FIELDS}}
    for key, kind in optional.items():
        if key in data:
            kwargs[key] = require(data, key, kind, path)
    unknown = set(data) - set(kwargs)
    if unknown:
        raise UserError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    return ModelSpec(**kwargs)


def from_hf_config(path: Path) -> ModelSpec:
    """A spec from a Hugging Face `config.json` (or a folder holding one)."""
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UserError(f"model config not found: {path}")
    try:
        cfg = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"malformed config.json {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise UserError(f"malformed config.json {path}: not a JSON object")
    if cfg.get("model_type") == "gemma3" and isinstance(cfg.get("text_config"), dict):
        cfg = {"model_type": "gemma3_text", "tie_word_embeddings": True, **cfg["text_config"]}  # the language model
    try:
        heads = int(cfg["num_attention_heads"])
        rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 10000.0
        model_type = str(cfg.get("model_type", "llama"))
        window = None if cfg.get("use_sliding_window") is False else cfg.get("sliding_window")
        return ModelSpec(
            name=path.parent.name or str(path),
            model_type=model_type,
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or 0),
            vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=float(rope),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", model_type == "gemma3_text")),
            attention_bias=bool(cfg.get("attention_bias", model_type in ("gpt_oss", *fam.QKV_BIAS_ONLY))),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_window=window,
            source_url=str(path),
            **fam.moe_fields(model_type, cfg),
        )
    except KeyError as e:
        raise UserError(f"{path}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: bad value: {e}") from None


def _data_dir() -> Path:
    return Path(str(resources.files("llmdissect.specs") / "data" / "models"))


@lru_cache(maxsize=1)
def _presets() -> dict[str, ModelSpec]:
    specs = [_from_toml(p) for p in sorted(_data_dir().glob("*.toml"))]
    return {s.name: s for s in specs}


def list_models() -> list[ModelSpec]:
    return list(_presets().values())


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name, a model TOML file, a `config.json`, or a folder holding one."""
    presets = _presets()
    key = name_or_path.strip().lower()
    if key in presets:
        return presets[key]
    path = Path(name_or_path).expanduser()
    if path.suffix == ".toml":
        return _from_toml(path)
    if path.suffix == ".json" or path.is_dir() or "/" in name_or_path:
        return from_hf_config(path)
    raise UserError(f"unknown model {name_or_path!r}; known: {', '.join(presets)} "
                    f"(or give a path to a config.json or model folder)")
