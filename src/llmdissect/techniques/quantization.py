"""Weight quantization toggles (torchao and bitsandbytes) and the bytes a model's weights take.

`--quant` names, what they do, and where they run:

| name           | library      | weights        | activations     | runs on            |
| -------------- | ------------ | -------------- | --------------- | ------------------ |
| none           | -            | compute dtype  | compute dtype   | everywhere         |
| int8-weight    | torchao      | int8 per-row   | compute dtype   | CPU, CUDA          |
| int8-dynamic   | torchao      | int8 per-row   | int8 (dynamic)  | CPU, CUDA          |
| int4-weight    | torchao      | int4 groups    | bf16            | CUDA, bf16 only    |
| nf4            | bitsandbytes | NF4 blocks     | compute dtype   | CPU, CUDA          |
| int8-bnb       | bitsandbytes | LLM.int8 rows  | compute dtype   | CPU, CUDA          |

Every method but int4-weight also ran here on a CPU with fp32, bf16 and fp16 compute
(torchao 0.18, bitsandbytes 0.50), so int4-weight is the only CUDA-only path.
Every linear layer of the decoder is quantized; the output head (`lm_head`) and the
embedding stay in the compute dtype, as transformers does for bitsandbytes by default.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmdissect.errors import UserError

QUANT_METHODS = ("none", "int8-weight", "int8-dynamic", "int4-weight", "nf4", "int8-bnb")
KEEP_MODULES = ("lm_head",)
"""Linear layers left unquantized (by attribute name)."""


def check_quant(name: str) -> str:
    if name not in QUANT_METHODS:
        raise UserError(f"unknown quantization {name!r}; choose one of {', '.join(QUANT_METHODS)}")
    return name


def unsupported_reason(quant: str, device: str, dtype: str) -> str | None:
    """Why `quant` cannot run with `dtype` on `device` (a skip reason), or None when it can."""
    check_quant(quant)
    cuda = str(device).startswith("cuda")
    if quant == "int4-weight":
        if not cuda:
            return ("int4-weight (torchao tinygemm int4 kernel) needs a CUDA GPU; on CPU use int8-weight, "
                    "int8-dynamic or nf4")
        if dtype != "bf16":
            return f"int4-weight needs --dtype bf16 on CUDA (its int4 kernel takes bf16 activations), not {dtype}"
    return None


def _linear_children(model: Any) -> Iterable[tuple[Any, str, Any]]:
    import torch.nn as nn

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and name not in KEEP_MODULES:
                yield parent, name, child


def _torchao(model: Any, quant: str, group_size: int = 0) -> None:
    import torch.nn as nn
    from torchao.quantization import (
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        quantize_,
    )

    if quant == "int4-weight" and group_size:
        config = Int4WeightOnlyConfig(group_size=group_size)
    else:
        config = {"int8-weight": Int8WeightOnlyConfig, "int8-dynamic": Int8DynamicActivationInt8WeightConfig,
                  "int4-weight": Int4WeightOnlyConfig}[quant]()
    quantize_(model, config, filter_fn=lambda m, fqn: isinstance(m, nn.Linear)
              and fqn.rsplit(".", 1)[-1] not in KEEP_MODULES)


def _bitsandbytes(model: Any, quant: str, dtype: str, device: str) -> None:
    import bitsandbytes as bnb

    from llmdissect.dtypes import torch_dtype

    for parent, name, lin in list(_linear_children(model)):
        bias = lin.bias is not None
        if quant == "nf4":
            new = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=bias, compute_dtype=torch_dtype(dtype),
                                    quant_type="nf4", device="cpu")
            new.weight = bnb.nn.Params4bit(lin.weight.data.to("cpu"), requires_grad=False, quant_type="nf4")
        else:  # LLM.int8(): int8 rows with absmax scales; threshold 0 keeps every column int8
            new = bnb.nn.Linear8bitLt(lin.in_features, lin.out_features, bias=bias, has_fp16_weights=False,
                                      threshold=0.0, device="cpu")
            new.weight = bnb.nn.Int8Params(lin.weight.data.to("cpu"), requires_grad=False, has_fp16_weights=False)
        if bias:
            new.bias = lin.bias
        setattr(parent, name, new.to(device))  # moving the parameter quantizes it


def apply_quantization(model: Any, quant: str, *, dtype: str = "fp32", device: str = "cpu",
                       group_size: int = 0) -> Any:
    """Quantize `model` in place (and return it); `group_size` is int4-weight's (0: torchao's
    default, 128). Raises UserError where the combination cannot run here; call
    `unsupported_reason` first to turn that into a skip."""
    reason = unsupported_reason(quant, device, dtype)
    if reason:
        raise UserError(reason)
    if quant == "none":
        return model
    if quant in ("int8-weight", "int8-dynamic", "int4-weight"):
        _torchao(model, quant, group_size)
    else:
        _bitsandbytes(model, quant, dtype, device)
    return model


def _leaf_tensors(t: Any) -> list[Any]:
    """The plain tensors that hold a (possibly quantized, subclassed) tensor's data."""
    import torch

    flatten = getattr(t, "__tensor_flatten__", None)
    if flatten is not None and type(t) not in (torch.Tensor, torch.nn.Parameter):
        names, _ = flatten()
        return [leaf for n in names for leaf in _leaf_tensors(getattr(t, n))]
    out = [t]
    state = getattr(t, "quant_state", None)  # bitsandbytes 4-bit: block absmax (+ nested) and code
    while state is not None:
        out += [x for x in (getattr(state, "absmax", None), getattr(state, "code", None)) if x is not None]
        state = getattr(state, "state2", None)
    scb = getattr(t, "SCB", None)  # bitsandbytes int8: per-row scales
    if scb is not None:
        out.append(scb)
    return out


def weight_bytes(model: Any, exclude: Iterable[Any] = ()) -> int:
    """Bytes of the model's parameters and buffers as stored (quantized data, scales and
    zero points included), each storage counted once; tensors in `exclude` are left out."""
    skip = {id(t) for t in exclude}
    seen: dict[tuple[str, int], int] = {}
    tensors = [*model.parameters(), *model.buffers()]
    for t in tensors:
        if id(t) in skip:
            continue
        for leaf in _leaf_tensors(t):
            st = leaf.untyped_storage()
            seen[(str(leaf.device), st.data_ptr())] = st.nbytes()
    return sum(seen.values())


def weight_bytes_read_per_step(model: Any) -> int:
    """Weight bytes one decode step reads: every weight except the input embedding table, of
    which a step reads only the rows of its tokens (negligible). A tied head is read in full."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is emb
    return weight_bytes(model, exclude=() if tied else (emb,))
