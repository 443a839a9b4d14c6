"""Weight bytes of a (quantized) model and the parameter count of LoRA adapters.

Quantized storage, per linear weight of `n = out x in` elements (the head and embedding
stay in the compute dtype, as transformers and `techniques.quantization` do):

- `nf4` (bitsandbytes Params4bit, QLoRA, arXiv 2305.14314): two 4-bit codes per byte, n/2;
  one absmax per block of 64. Double quantization (bitsandbytes' default
  `compress_statistics=True`) stores the absmax as uint8 (n/64 bytes) with an fp32 scale per
  256 of them, plus the 256-entry fp32 code of that second level (1 KiB); without it the
  absmax is fp32 (4 n / 64). Both keep the 16-entry fp32 NF4 code (64 bytes).
- `int8-bnb` (LLM.int8(), arXiv 2208.07339): n int8 + one fp32 scale per output row (SCB).
- `int8-weight` / `int8-dynamic` (torchao Int8Tensor): n int8 + a per-row fp32 scale + a
  per-row int8 zero point (choose_qparams_affine with scale_dtype=float32 whatever the
  weight's dtype, torchao 0.18).
- `int4-weight` (torchao, groups of 128): n/2 + a scale and a zero point per group in bf16.
- `fp8` (inference only: FP8 E4M3 weights and activations, one fp32 scale per tensor, as
  TensorRT-LLM's and Transformer Engine's per-tensor scaling; Micikevicius et al., "FP8
  Formats for Deep Learning", arXiv 2209.05433): n + 4; its GEMMs run at the device's FP8
  peak (`FP8_GEMM`), so it needs a device that has one.
"""
from __future__ import annotations

import math

from llmdissect.errors import UserError
from llmdissect.specs.models import ModelSpec

QUANTS = ("none", "int8", "int8-weight", "int8-dynamic", "int8-bnb", "nf4", "int4-weight", "fp8")
FP8_GEMM = ("fp8",)
"""Schemes whose GEMMs take FP8 inputs (the activations are cast too), at the FP8 peak."""
QUANT_ALIASES = {"int8": "int8-weight"}
NF4_BLOCK = 64
NF4_NESTED_BLOCK = 256
INT4_GROUP = 128
LORA_TARGETS_DEFAULT = ("q_proj", "k_proj", "v_proj", "o_proj")  # as `bench finetune` (workloads.train_config)
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def check_quant(name: str) -> str:
    """The canonical quantization name (`int8` means torchao's int8 weight-only)."""
    if name not in QUANTS:
        raise UserError(f"unknown quantization {name!r}; choose one of {', '.join(QUANTS)}")
    return QUANT_ALIASES.get(name, name)


def nf4_bytes(n_elements: int, double_quant: bool = True) -> int:
    """Bytes of one NF4-quantized weight (packed codes, block absmax, quantization maps)."""
    blocks = math.ceil(n_elements / NF4_BLOCK)
    codes = math.ceil(n_elements / 2)
    if double_quant:
        return codes + blocks + math.ceil(blocks / NF4_NESTED_BLOCK) * 4 + 256 * 4 + 16 * 4
    return codes + blocks * 4 + 16 * 4


def int8_bnb_bytes(out_features: int, in_features: int) -> int:
    """LLM.int8() weight: int8 values plus an fp32 absmax per output row."""
    return out_features * in_features + out_features * 4


def int8_torchao_bytes(out_features: int, in_features: int) -> int:
    """torchao int8 weight-only: int8 values, a per-row fp32 scale and an int8 zero point."""
    return out_features * in_features + out_features * (4 + 1)


def int4_torchao_bytes(out_features: int, in_features: int) -> int:
    """torchao int4 weight-only (groups of 128 along the input): packed codes plus bf16
    scale and zero point per group."""
    return out_features * in_features // 2 + out_features * math.ceil(in_features / INT4_GROUP) * 2 * 2


def linear_weight_bytes(out_features: int, in_features: int, quant: str, dtype_bytes: float,
                        double_quant: bool = True) -> int:
    """Bytes one linear weight takes under `quant` (canonical name). `double_quant` is NF4's
    (bitsandbytes' Params4bit default, as `techniques.quantization` builds it)."""
    if quant == "none":
        return int(out_features * in_features * dtype_bytes)
    if quant == "nf4":
        return nf4_bytes(out_features * in_features, double_quant)
    if quant == "int8-bnb":
        return int8_bnb_bytes(out_features, in_features)
    if quant in ("int8-weight", "int8-dynamic"):
        return int8_torchao_bytes(out_features, in_features)
    if quant == "int4-weight":
        return int4_torchao_bytes(out_features, in_features)
    if quant == "fp8":
        return out_features * in_features + 4
    raise UserError(f"unknown quantization {quant!r}")


def layer_linear_shapes(m: ModelSpec) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) of each linear layer of one decoder layer."""
    h, f = m.hidden_size, m.intermediate_size
    gate = {"gate_proj": (f, h)} if m.gated_mlp else {}  # GPT's MLP has no gate
    return {"q_proj": (m.q_dim, h), "k_proj": (m.kv_dim, h), "v_proj": (m.kv_dim, h), "o_proj": (h, m.q_dim),
            **gate, "up_proj": (f, h), "down_proj": (h, f)}


def model_weight_bytes(m: ModelSpec, quant: str, dtype_bytes: float) -> int:
    """All weights of the model as stored: quantized decoder linears (their biases, norms,
    embedding and head in the compute dtype)."""
    quant = check_quant(quant)
    linear = sum(linear_weight_bytes(o, i, quant, dtype_bytes) for o, i in layer_linear_shapes(m).values())
    linear_params = sum(o * i for o, i in layer_linear_shapes(m).values())
    other_params = m.params - m.num_layers * linear_params
    return int(m.num_layers * linear + other_params * dtype_bytes)


def lora_params(m: ModelSpec, rank: int, targets: tuple[str, ...] = LORA_TARGETS_DEFAULT) -> int:
    """Trainable parameters of LoRA adapters (Hu et al., arXiv 2106.09685): each targeted
    linear W (out x in) gets A (rank x in) and B (out x rank), r (in + out) parameters."""
    shapes = layer_linear_shapes(m)
    unknown = [t for t in targets if t not in shapes]
    if unknown:
        raise UserError(f"unknown LoRA target(s) {', '.join(unknown)}; choose from {', '.join(LINEAR_NAMES)}")
    return m.num_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """`q_proj,v_proj`, or `all` for every linear layer of the decoder."""
    if text.strip() == "all":
        return LINEAR_NAMES
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    if not targets:
        raise UserError("--lora-targets is empty; give module names such as q_proj,v_proj or 'all'")
    return targets


def layer_weight_bytes(m: ModelSpec, quant: str, dtype_bytes: float) -> int:
    """One decoder layer's linear weights as stored (what a forward of the layer reads)."""
    quant = check_quant(quant)
    return sum(linear_weight_bytes(o, i, quant, dtype_bytes) for o, i in layer_linear_shapes(m).values())


DEQUANTIZED_COPY = ("nf4", "int8-bnb")
"""bitsandbytes dequantizes a whole weight to the compute dtype before its matmul; torchao's
int8/int4 kernels read the quantized weight directly."""


def layer_read_bytes(m: ModelSpec, quant: str, dtype_bytes: float) -> int:
    """Bytes one forward of a layer moves for its weights: the stored weights, plus writing
    and reading a dequantized copy where the library makes one."""
    quant = check_quant(quant)
    copy = 2 * sum(o * i for o, i in layer_linear_shapes(m).values()) * dtype_bytes if quant in DEQUANTIZED_COPY else 0
    return int(layer_weight_bytes(m, quant, dtype_bytes) + copy)
