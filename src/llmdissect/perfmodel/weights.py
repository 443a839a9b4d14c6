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
- `int4-weight` (torchao, groups of 128, or of `--group-size` 32, 64 or 256): n/2 + a scale
  and a zero point per group in bf16.
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
WEIGHT_STREAM_SCALE = {"int8-weight": 0.80, "int4-weight": 0.53}
"""The rate at which a GPU's weight-only kernel streams its quantized weights, as a fraction of
the 16-bit product's: the dequantization inside the kernel (Inductor's fused int8 product,
tinygemm's int4 `_weight_int4pack_mm`) costs the rest. torchao's own table
(torchao/quantization/README.md at 03d01ad: one A100, batch-1 decode, its "Memory Bandwidth
(GB/s)" the model's size times its tokens/s): Llama-2-7B bf16 1418.93, int8wo 1131.18 (0.797),
int4wo-64 751.42 (0.530); Llama-3-8B 1435.54, 1150.80 (0.802), 763.33 (0.532). Measured at
int4's group 64 and applied to every group size; int8 dynamic quantization (63.67 GB/s there,
a batch-1 int8 product without a fused kernel) is not scaled."""
NF4_BLOCK = 64
NF4_NESTED_BLOCK = 256
INT4_GROUP = 128
INT4_GROUP_SIZES = (32, 64, 128, 256)
"""The group sizes torchao's int4 weight-only quantization takes (Int4WeightOnlyConfig's
`group_size`, "choices are [256, 128, 64, 32]", torchao 0.18); 128 is its default."""
LORA_TARGETS_DEFAULT = ("q_proj", "k_proj", "v_proj", "o_proj")  # as `bench finetune` (workloads.train_config)
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def weight_stream_scale(quant: str, device_kind: str) -> float:
    """WEIGHT_STREAM_SCALE's figure for `quant` on a GPU, else 1 (a CPU's measured grid and
    bench infer price its own kernels)."""
    return WEIGHT_STREAM_SCALE.get(quant, 1.0) if device_kind == "gpu" else 1.0


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


def int4_torchao_bytes(out_features: int, in_features: int, group: int = INT4_GROUP) -> int:
    """torchao int4 weight-only (groups of `group` along the input): packed codes plus bf16
    scale and zero point per group (0.53 bytes a weight at 128, 0.625 at 32)."""
    return out_features * in_features // 2 + out_features * math.ceil(in_features / group) * 2 * 2


def check_group_size(quant: str, group_size: int) -> int:
    """The int4 group size a configuration runs with: `group_size` (0: torchao's default),
    which only int4-weight takes; 0 for every other scheme."""
    if quant != "int4-weight":
        if group_size:
            raise UserError(f"--group-size applies to --quant int4-weight, not {quant}")
        return 0
    if not group_size:
        return INT4_GROUP
    if group_size not in INT4_GROUP_SIZES:
        raise UserError(f"--group-size {group_size}: int4-weight takes {', '.join(map(str, INT4_GROUP_SIZES))}")
    return group_size


def group_size_key(group_size: int) -> int:
    """The group size a record's config names: only a departure from torchao's default (0
    where there is none), so that estimates and measurements of the default pair as before."""
    return 0 if group_size in (0, INT4_GROUP) else group_size


def linear_weight_bytes(out_features: int, in_features: int, quant: str, dtype_bytes: float,
                        double_quant: bool = True, group: int = INT4_GROUP) -> int:
    """Bytes one linear weight takes under `quant` (canonical name). `double_quant` is NF4's
    (bitsandbytes' Params4bit default, as `techniques.quantization` builds it); `group` the
    int4 group size."""
    if quant == "none":
        return int(out_features * in_features * dtype_bytes)
    if quant == "nf4":
        return nf4_bytes(out_features * in_features, double_quant)
    if quant == "int8-bnb":
        return int8_bnb_bytes(out_features, in_features)
    if quant in ("int8-weight", "int8-dynamic"):
        return int8_torchao_bytes(out_features, in_features)
    if quant == "int4-weight":
        return int4_torchao_bytes(out_features, in_features, group or INT4_GROUP)
    if quant == "fp8":
        return out_features * in_features + 4
    raise UserError(f"unknown quantization {quant!r}")


MLA_NAMES = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")


def layer_linear_shapes(m: ModelSpec, moe_layer: bool = True) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) of each linear layer of one decoder layer (a MoE model's
    MoE layer unless `moe_layer` is false: its router `gate`, its routed experts as one
    stacked matrix each, `experts.gate_up_proj` and `experts.down_proj`, and shared experts)."""
    h, f = m.hidden_size, m.intermediate_size
    if m.is_mla:
        names = MLA_NAMES if m.q_lora_rank else ("q_proj", *MLA_NAMES[2:])
        attn = {name: (n, k) for name, (k, n) in zip(names, m.mla_gemm_shapes())}
    else:
        attn = {"q_proj": (m.q_dim, h), "k_proj": (m.kv_dim, h), "v_proj": (m.kv_dim, h), "o_proj": (h, m.q_dim)}
    if m.is_moe and moe_layer:
        E, fe, fs = m.num_experts, m.expert_intermediate_size, m.num_shared_experts * m.expert_intermediate_size
        shared = {"shared_experts.gate_proj": (fs, h), "shared_experts.up_proj": (fs, h),
                  "shared_experts.down_proj": (h, fs)} if fs else {}
        return {**attn, "gate": (E, h), "experts.gate_up_proj": (E * 2 * fe, h), "experts.down_proj": (E * h, fe),
                **shared}
    gate = {"gate_proj": (f, h)} if m.gated_mlp else {}  # GPT's MLP has no gate
    return {**attn, **gate, "up_proj": (f, h), "down_proj": (h, f)}


def _layer_groups(m: ModelSpec) -> list[tuple[int, dict[str, tuple[int, int]]]]:
    """(how many layers, their linear shapes): DeepSeek's dense first layers, then the MoE ones."""
    return [(m.dense_layers, layer_linear_shapes(m, moe_layer=False)), (m.moe_layers, layer_linear_shapes(m))]


def model_weight_bytes(m: ModelSpec, quant: str, dtype_bytes: float, group: int = INT4_GROUP) -> int:
    """All weights of the model as stored: quantized decoder linears (their biases, norms,
    embedding and head in the compute dtype); `group` the int4 group size."""
    quant = check_quant(quant)
    linear = sum(n * sum(linear_weight_bytes(o, i, quant, dtype_bytes, group=group) for o, i in shapes.values())
                 for n, shapes in _layer_groups(m))
    linear_params = sum(n * sum(o * i for o, i in shapes.values()) for n, shapes in _layer_groups(m))
    other_params = m.params - linear_params
    return int(linear + other_params * dtype_bytes)


MLP_NAMES = ("gate_proj", "up_proj", "down_proj")


EXPERTS_TARGET = "experts"
"""LoRA on every routed expert of the MoE layers (their stacked gate_up and down weights)."""


def lora_target_names(m: ModelSpec) -> tuple[str, ...]:
    """The linears LoRA may adapt: the attention's projections, a dense model's MLP, and a
    MoE model's routed experts (`experts`; its router and dense first layers are not targets)."""
    names = tuple(t for t in layer_linear_shapes(m, moe_layer=False) if not (m.is_moe and t in MLP_NAMES))
    return names + ((EXPERTS_TARGET,) if m.is_moe and m.model_type != "gpt_oss" else ())


def expert_lora_shapes(m: ModelSpec) -> tuple[tuple[int, int], tuple[int, int]]:
    """(out, in) of one expert's two weights that `experts` adapts: gate_up [2 fe, h], down [h, fe]."""
    h, fe = m.hidden_size, m.expert_intermediate_size
    return (2 * fe, h), (h, fe)


def resolve_lora_targets(m: ModelSpec, targets: tuple[str, ...]) -> tuple[str, ...]:
    """`targets` for this model: the default (q, k, v, o) becomes MLA's five projections,
    `all` every linear of the attention and the dense MLP (the experts only when named);
    anything the model lacks is a UserError."""
    if m.is_mla and tuple(targets) == LORA_TARGETS_DEFAULT:
        return tuple(t for t in lora_target_names(m) if t not in MLP_NAMES and t != EXPERTS_TARGET)
    if tuple(targets) == LINEAR_NAMES:  # `all`
        return tuple(t for t in lora_target_names(m) if t != EXPERTS_TARGET)
    unknown = [t for t in targets if t not in lora_target_names(m)]
    if unknown:
        raise UserError(f"unknown LoRA target(s) {', '.join(unknown)} for {m.name}; choose from "
                        f"{', '.join(lora_target_names(m))}")
    return tuple(targets)


def lora_params(m: ModelSpec, rank: int, targets: tuple[str, ...] = LORA_TARGETS_DEFAULT) -> int:
    """Trainable parameters of LoRA adapters (Hu et al., arXiv 2106.09685): each targeted
    linear W (out x in) gets A (rank x in) and B (out x rank), r (in + out) parameters.
    MLA's default targets are its five attention projections. `experts` gives each routed
    expert of every MoE layer its own A and B on its gate_up and down weights (PEFT's
    target_parameters)."""
    shapes = layer_linear_shapes(m, moe_layer=False)
    resolved = resolve_lora_targets(m, targets)
    linear = m.num_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in resolved if t != EXPERTS_TARGET)
    experts = (EXPERTS_TARGET in resolved) * m.moe_layers * m.num_experts * sum(
        rank * (o + i) for o, i in expert_lora_shapes(m))
    return linear + experts


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """`q_proj,v_proj`, or `all` for every linear layer of the decoder."""
    if text.strip() == "all":
        return LINEAR_NAMES
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    if not targets:
        raise UserError("--lora-targets is empty; give module names such as q_proj,v_proj or 'all'")
    return targets


def layer_weight_bytes(m: ModelSpec, quant: str, dtype_bytes: float, group: int = INT4_GROUP) -> int:
    """One decoder layer's linear weights as stored (what a forward of the layer reads; the
    mean over a MoE model's dense and MoE layers); `group` the int4 group size."""
    quant = check_quant(quant)
    total = sum(n * sum(linear_weight_bytes(o, i, quant, dtype_bytes, group=group) for o, i in shapes.values())
                for n, shapes in _layer_groups(m))
    return total // m.num_layers if total % m.num_layers == 0 else total / m.num_layers


DEQUANTIZED_COPY = ("nf4", "int8-bnb")
"""bitsandbytes dequantizes a whole weight to the compute dtype before its matmul; torchao's
int8/int4 kernels read the quantized weight directly."""


def _layer_elements(m: ModelSpec) -> float:
    """One decoder layer's linear weight elements (the mean over a MoE model's dense and MoE layers)."""
    return sum(n * sum(o * i for o, i in shapes.values()) for n, shapes in _layer_groups(m)) / m.num_layers


# bitsandbytes' batch-1 4-bit inference kernels (gemv_4bit; bitsandbytes 0.40.0 release notes,
# 2023-07-12: "Expected speedups vs 16-bit precision (fp16/bf16) for matrix multiplications with
# inner product dimension of at least 4096 (LLaMA 7B) is: 2.2x for Turing ..., 3.4x for Ampere ...,
# 4.0x for Ada/Hopper"). bnb.matmul_4bit takes them where its input is a single row that needs no
# gradient (a batch-1 decode step); every other product dequantizes the weight first.
NF4_GEMV_SPEEDUP = {"turing": 2.2, "ampere": 3.4, "ada": 4.0, "hopper": 4.0}


def decode_layer_read_bytes(m: ModelSpec, quant: str, dtype_bytes: float, group: int = INT4_GROUP,
                            architecture: str | None = None, batch: int = 1, device_kind: str = "gpu"):
    """What one decode step's products read for a layer's weights. NF4 at batch 1 on a GPU of an
    architecture in NF4_GEMV_SPEEDUP: the 16-bit weights' bytes over the kernel's published
    speed-up (the product priced as the 16-bit one, that much faster; no dequantized copy).
    Otherwise layer_read_bytes."""
    speedup = NF4_GEMV_SPEEDUP.get((architecture or "").lower())
    if check_quant(quant) == "nf4" and device_kind == "gpu" and batch == 1 and speedup:
        return _layer_elements(m) * dtype_bytes / speedup
    return layer_read_bytes(m, quant, dtype_bytes, group)


def layer_read_bytes(m: ModelSpec, quant: str, dtype_bytes: float, group: int = INT4_GROUP) -> int:
    """Bytes one forward of a layer moves for its weights: the stored weights, plus writing
    and reading a dequantized copy where the library makes one."""
    quant = check_quant(quant)
    copy = 2 * _layer_elements(m) * dtype_bytes if quant in DEQUANTIZED_COPY else 0
    return int(layer_weight_bytes(m, quant, dtype_bytes, group) + copy)
