"""Llama-family model specifications and their exact parameter counts.

A spec is what a Hugging Face `config.json` of a Llama-family decoder says about shapes.
Counts follow the module structure of transformers' LlamaForCausalLM: per layer q/k/v/o
projections (biases when `attention_bias`), gate/up/down projections (biases when
`mlp_bias`), two RMSNorm weights; then a final RMSNorm and the output head.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError
from llmdissect.specs.tomlfile import read_toml, require

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "gpt")
MEASURABLE_MODEL_TYPES = ("llama", "mistral")
"""`gpt` (GPT-2/3, Megatron-LM, MPT shapes: a GELU MLP of two matrices, LayerNorm, learned or
no positions) is for the estimator only; `bench` builds Llama-family models."""


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a Llama-family decoder-only model."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    max_position_embeddings: int
    model_type: str = "llama"
    head_dim: int = 0
    """Per-head width; 0 means hidden_size // num_heads."""
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None
    description: str = ""
    source_url: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // max(self.num_heads, 1))
        self.validate()

    def validate(self) -> None:
        src = self.source_url or self.name
        for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                    "vocab_size", "max_position_embeddings", "head_dim"):
            if getattr(self, key) <= 0:
                raise UserError(f"model {self.name!r}: {key} must be positive ({src})")
        if self.num_heads % self.num_kv_heads:
            raise UserError(f"model {self.name!r}: num_heads ({self.num_heads}) is not a multiple "
                            f"of num_kv_heads ({self.num_kv_heads})")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise UserError(f"model {self.name!r}: model_type {self.model_type!r} is not supported "
                            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")

    # ---- derived shapes -------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (d_attn = heads x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads under grouped-query attention."""
        return self.num_kv_heads * self.head_dim

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU (gate, up, down: Llama, Mistral) rather than GPT's GELU MLP (up, down)."""
        return self.model_type != "gpt"

    @property
    def mlp_in_matrices(self) -> int:
        """The MLP's matrices from h to f: gate and up (2), or GPT's one."""
        return 2 if self.gated_mlp else 1

    # ---- parameter counts -----------------------------------------------------------
    @property
    def params_attention_per_layer(self) -> int:
        h = self.hidden_size
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        biases = (self.q_dim + 2 * self.kv_dim + h) if self.attention_bias else 0
        return weights + biases

    @property
    def params_mlp_per_layer(self) -> int:
        h, f = self.hidden_size, self.intermediate_size
        k = self.mlp_in_matrices
        return (k + 1) * h * f + ((k * f + h) if self.mlp_bias else 0)

    @property
    def params_norm_per_layer(self) -> int:
        return 2 * self.hidden_size

    @property
    def params_per_layer(self) -> int:
        return self.params_attention_per_layer + self.params_mlp_per_layer + self.params_norm_per_layer

    @property
    def params_embedding(self) -> int:
        """The input embedding table."""
        return self.vocab_size * self.hidden_size

    @property
    def params_head(self) -> int:
        """The output head (shared with the embedding when tied, but still a matmul)."""
        return self.vocab_size * self.hidden_size

    @property
    def params_matmul(self) -> int:
        """N of METRICS.md: parameters used in matrix multiplies (every linear layer,
        output head included; not the input embedding or norms)."""
        return self.num_layers * (self.params_attention_per_layer + self.params_mlp_per_layer) + self.params_head

    @property
    def params(self) -> int:
        """Total distinct parameters, as `sum(p.numel() for p in model.parameters())`."""
        head = 0 if self.tie_word_embeddings else self.params_head
        return self.params_embedding + self.num_layers * self.params_per_layer + self.hidden_size + head

    # ---- conversions ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        d.update(params=self.params, params_matmul=self.params_matmul, params_embedding=self.params_embedding)
        return d

    def hf_config_dict(self) -> dict[str, Any]:
        """The `config.json` of the equivalent transformers model."""
        if self.model_type not in MEASURABLE_MODEL_TYPES:
            raise UserError(f"model {self.name!r}: model_type {self.model_type!r} can be estimated, not built "
                            f"(bench builds {', '.join(MEASURABLE_MODEL_TYPES)})")
        arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}[self.model_type]
        d: dict[str, Any] = {
            "architectures": [arch], "model_type": self.model_type,
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers, "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim,
            "vocab_size": self.vocab_size, "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings, "hidden_act": "silu",
            "bos_token_id": 1, "eos_token_id": 2,
        }
        if self.model_type == "llama":
            d.update(attention_bias=self.attention_bias, mlp_bias=self.mlp_bias)
        if self.sliding_window is not None:
            d["sliding_window"] = self.sliding_window
        return d

    def hf_config(self):
        """A transformers PretrainedConfig (imports transformers)."""
        from transformers import AutoConfig

        d = self.hf_config_dict()
        return AutoConfig.for_model(d.pop("model_type"), **{k: v for k, v in d.items() if k != "architectures"})


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
                "sliding_window": int, "description": str, "source_url": str}
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
    try:
        heads = int(cfg["num_attention_heads"])
        rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 10000.0
        return ModelSpec(
            name=path.parent.name or str(path),
            model_type=str(cfg.get("model_type", "llama")),
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
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", False)),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_window=cfg.get("sliding_window"),
            source_url=str(path),
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
