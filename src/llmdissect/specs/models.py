"""Decoder-only model specifications and their exact parameter counts.

A spec is what a Hugging Face `config.json` says about shapes. Counts follow the module
structure of transformers' models: per layer q/k/v/o projections (biases when
`attention_bias`), gate/up/down projections (biases when `mlp_bias`), two RMSNorm weights;
then a final RMSNorm and the output head. The families of specs/families.py add to this:
mixtures of experts (a router and `num_experts` expert MLPs, `experts_per_token` of them
active per token, shared experts, dense first layers), multi-head latent attention (MLA's
low-rank q and kv projections) and sliding-window layers. `params` counts every parameter,
`params_active` those one token uses (routed experts: only its top k).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from llmdissect.errors import UserError
from llmdissect.specs import families as fam

MEASURABLE_MODEL_TYPES = fam.DENSE_TYPES + fam.MOE_TYPES
SUPPORTED_MODEL_TYPES = (*MEASURABLE_MODEL_TYPES, "gpt")
"""`gpt` (GPT-2/3, Megatron-LM, MPT shapes: a GELU MLP of two matrices, LayerNorm, learned or
no positions) is for the estimator only; `bench` builds Llama-family models."""


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only model (Llama family, its MoE, MLA and sliding-window kin)."""

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
    sliding_window_pattern: int = 0
    """Layer i attends globally when (i + 1) % p == 0, the others within `sliding_window`
    (Gemma 3: 6, gpt-oss: 2); 0: every layer within the window (Mistral)."""
    num_experts: int = 0
    """Routed experts per MoE layer; 0 is a dense MLP."""
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    num_shared_experts: int = 0
    """DeepSeek's always-active experts, one MLP of width num_shared x expert width."""
    first_dense_layers: int = 0
    """DeepSeek's `first_k_dense_replace`: the first layers keep a dense MLP of intermediate_size."""
    q_lora_rank: int = 0
    """MLA (when kv_lora_rank > 0): rank of the query compression; 0 projects q directly."""
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    description: str = ""
    source_url: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kv_lora_rank:  # MLA's score width; every head has its own key and value
            object.__setattr__(self, "head_dim", self.qk_nope_head_dim + self.qk_rope_head_dim)
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
        if (self.model_type in fam.MOE_TYPES) != self.is_moe:
            raise UserError(f"model {self.name!r}: num_experts must be positive exactly for the MoE families "
                            f"({', '.join(fam.MOE_TYPES)}) ({src})")
        if self.is_moe and not (0 < self.experts_per_token <= self.num_experts and self.expert_intermediate_size > 0
                                and 0 <= self.first_dense_layers < self.num_layers):
            raise UserError(f"model {self.name!r}: need 0 < experts_per_token <= num_experts, a positive "
                            f"expert_intermediate_size and first_dense_layers < num_layers ({src})")
        if (self.model_type == "deepseek_v3") != self.is_mla or (self.is_mla and min(
                self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim) <= 0):
            raise UserError(f"model {self.name!r}: latent attention (kv_lora_rank, qk_nope_head_dim, "
                            f"qk_rope_head_dim, v_head_dim all positive) is deepseek_v3's alone ({src})")
        if self.model_type == "gpt_oss" and not self.attention_bias:
            raise UserError(f"model {self.name!r}: gpt_oss projections always have biases (attention_bias) ({src})")
        if self.model_type in fam.QKV_BIAS_ONLY and not self.attention_bias:
            raise UserError(f"model {self.name!r}: {self.model_type} q, k, v projections always have biases "
                            f"(attention_bias) ({src})")
        if self.sliding_window_pattern and not self.sliding_window:
            raise UserError(f"model {self.name!r}: sliding_window_pattern needs sliding_window ({src})")

    # ---- derived shapes -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (all but DeepSeek's dense first ones)."""
        return (self.num_layers - self.first_dense_layers) if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    @property
    def global_layers(self) -> int:
        """Layers that attend to the whole context (the rest see `sliding_window` positions)."""
        if not self.sliding_window:
            return self.num_layers
        return self.num_layers // self.sliding_window_pattern if self.sliding_window_pattern else 0

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (d_attn = heads x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads under grouped-query attention."""
        return self.num_kv_heads * self.head_dim

    @property
    def mlp_token_width(self) -> int:
        """The MLP width one token passes through in a typical layer: intermediate_size, or
        in a MoE model its k routed and the shared experts (active_intermediate_size)."""
        return self.active_intermediate_size if self.is_moe else self.intermediate_size

    @property
    def active_intermediate_size(self) -> int:
        """The MLP width one token passes through in a MoE layer: k routed experts plus the
        shared ones (a dense layer's is intermediate_size)."""
        return (self.experts_per_token + self.num_shared_experts) * self.expert_intermediate_size

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU (gate, up, down: Llama, Mistral) rather than GPT's GELU MLP (up, down)."""
        return self.model_type != "gpt"

    @property
    def mlp_in_matrices(self) -> int:
        """The MLP's matrices from h to f: gate and up (2), or GPT's one."""
        return 2 if self.gated_mlp else 1

    # ---- parameter counts -----------------------------------------------------------
    def mla_gemm_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of MLA's projections as transformers' DeepseekV3Attention holds them:
        q_a (h -> q rank) and q_b (-> heads x (nope + rope)) or one q_proj; kv_a_proj_with_mqa
        (h -> kv rank + rope); kv_b (kv rank -> heads x (nope + v)); o (heads x v -> h)."""
        h, a, ql, kvl = self.hidden_size, self.num_heads, self.q_lora_rank, self.kv_lora_rank
        qk, r, v = self.head_dim, self.qk_rope_head_dim, self.v_head_dim
        q = [(h, ql), (ql, a * qk)] if ql else [(h, a * qk)]
        return [*q, (h, kvl + r), (kvl, a * (self.qk_nope_head_dim + v)), (a * v, h)]

    @property
    def params_attention_per_layer(self) -> int:
        """The attention's matmul weights (and their biases)."""
        if self.is_mla:
            return sum(k * n for k, n in self.mla_gemm_shapes())
        h = self.hidden_size
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        o_bias = 0 if self.model_type in fam.QKV_BIAS_ONLY else h
        biases = (self.q_dim + 2 * self.kv_dim + o_bias) if self.attention_bias else 0
        return weights + biases

    def _mlp_params(self, f: int, bias: bool) -> int:
        h, k = self.hidden_size, self.mlp_in_matrices
        return (k + 1) * h * f + ((k * f + h) if bias else 0)

    @property
    def params_expert(self) -> int:
        """One routed expert: gate, up, down of width expert_intermediate_size (gpt-oss: with biases)."""
        return self._mlp_params(self.expert_intermediate_size, self.model_type == "gpt_oss")

    @property
    def params_router(self) -> int:
        """The router's h x E scores (gpt-oss: with a bias)."""
        return self.hidden_size * self.num_experts + (self.num_experts if self.model_type == "gpt_oss" else 0)

    @property
    def params_moe_layer(self) -> int:
        """One MoE layer's MLP: router, every routed expert, the shared experts."""
        shared = self._mlp_params(self.num_shared_experts * self.expert_intermediate_size, False)
        return self.params_router + self.num_experts * self.params_expert + (shared if self.num_shared_experts else 0)

    @property
    def params_moe_layer_active(self) -> int:
        """What one token uses of a MoE layer's MLP: router, its k experts, the shared ones."""
        return self.params_moe_layer - (self.num_experts - self.experts_per_token) * self.params_expert

    @property
    def params_dense_mlp(self) -> int:
        return self._mlp_params(self.intermediate_size, self.mlp_bias)

    @property
    def params_mlp_all_layers(self) -> int:
        return self.dense_layers * self.params_dense_mlp + self.moe_layers * self.params_moe_layer

    @property
    def params_mlp_active_all_layers(self) -> int:
        return self.dense_layers * self.params_dense_mlp + self.moe_layers * self.params_moe_layer_active

    @property
    def params_mlp_per_layer(self):
        """All MLP parameters of a layer, averaged over the layers (exact when they are alike)."""
        total = self.params_mlp_all_layers
        return total // self.num_layers if total % self.num_layers == 0 else total / self.num_layers

    @property
    def params_norm_per_layer(self) -> int:
        """RMSNorm weights and other vectors outside the matmuls: q/k norms, MLA's rank
        norms, gpt-oss's attention sinks (one logit per head)."""
        qk = {"head": 2 * self.head_dim, "width": self.q_dim + self.kv_dim}.get(fam.QK_NORM.get(self.model_type, ""), 0)
        mla = (self.q_lora_rank + self.kv_lora_rank) if self.is_mla else 0
        sinks = self.num_heads if self.model_type == "gpt_oss" else 0
        return fam.NORMS_PER_LAYER.get(self.model_type, 2) * self.hidden_size + qk + mla + sinks

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
        """N of METRICS.md: parameters one token multiplies by (every linear layer, output head
        included, not the input embedding or norms; of a MoE layer the router, the token's
        top-k experts and the shared ones). FLOPs follow it: 2N per token forward."""
        return (self.num_layers * self.params_attention_per_layer + self.params_mlp_active_all_layers
                + self.params_head)

    @property
    def params_matmul_total(self) -> int:
        """Every matmul weight, all experts included: what memory holds and reads."""
        return self.num_layers * self.params_attention_per_layer + self.params_mlp_all_layers + self.params_head

    @property
    def params(self) -> int:
        """Total distinct parameters, as `sum(p.numel() for p in model.parameters())`."""
        head = 0 if self.tie_word_embeddings else self.params_head
        return (self.params_embedding + self.num_layers * (self.params_attention_per_layer + self.params_norm_per_layer)
                + self.params_mlp_all_layers + self.hidden_size + head)

    @property
    def params_active(self) -> int:
        """Parameters one token uses: all but the routed experts it was not sent to."""
        return self.params - self.params_mlp_all_layers + self.params_mlp_active_all_layers

    # ---- conversions ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        d.update(params=self.params, params_active=self.params_active, params_matmul=self.params_matmul,
                 params_matmul_total=self.params_matmul_total, params_embedding=self.params_embedding)
        return d

    def hf_config_dict(self) -> dict[str, Any]:
        """The `config.json` of the equivalent transformers model."""
        if self.model_type not in MEASURABLE_MODEL_TYPES:
            raise UserError(f"model {self.name!r}: model_type {self.model_type!r} can be estimated, not built "
                            f"(bench builds {', '.join(MEASURABLE_MODEL_TYPES)})")
        arch = fam.ARCHITECTURES[self.model_type]
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
        d.update(fam.hf_extra_fields(self))
        return d

    def hf_config(self):
        """A transformers PretrainedConfig (imports transformers)."""
        from transformers import AutoConfig

        d = self.hf_config_dict()
        return AutoConfig.for_model(d.pop("model_type"), **{k: v for k, v in d.items() if k != "architectures"})


# the loaders live beside the spec; imported last, as they build ModelSpecs
from llmdissect.specs.model_files import from_hf_config, get_model, list_models  # noqa: E402

__all__ = ["ModelSpec", "from_hf_config", "get_model", "list_models"]
