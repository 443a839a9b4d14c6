"""Quantize, dequantize and quantized matmul cases (bitsandbytes NF4 and LLM.int8, torchao
int8 weight-only) on the layer's gate projection W [f, h], wherever the library runs here.

A case whose library is missing or cannot run on this device is left out, with the reason
returned beside the cases (the record lists it under `skipped`).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from llmdissect.micro.ops_cases import Maker, OpCase
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.weights import NF4_BLOCK
from llmdissect.specs.models import ModelSpec

NF4_DOUBLE_QUANT = False
"""As bitsandbytes.functional.quantize_4bit defaults (one fp32 absmax per block); the
cases' costs count the layout these calls make."""


def _bnb_cases(m_: Callable[[], Maker], T: int, k: int, n: int, e: float) -> list[OpCase]:
    def nf4_quant():
        import bitsandbytes.functional as F

        w = m_().randn(n, k, scale=k ** -0.5)
        return lambda: F.quantize_4bit(w, blocksize=NF4_BLOCK, compress_statistics=NF4_DOUBLE_QUANT,
                                       quant_type="nf4")

    def nf4_state(m: Maker) -> tuple[Any, Any]:
        import bitsandbytes.functional as F

        return F.quantize_4bit(m.randn(n, k, scale=k ** -0.5), blocksize=NF4_BLOCK,
                                 compress_statistics=NF4_DOUBLE_QUANT, quant_type="nf4")

    def nf4_dequant():
        import bitsandbytes.functional as F

        codes, state = nf4_state(m_())
        return lambda: F.dequantize_4bit(codes, state)

    def nf4_matmul():
        import bitsandbytes as bnb

        m = m_()
        codes, state = nf4_state(m)
        x = m.randn(T, k)
        return lambda: bnb.matmul_4bit(x, codes.t(), quant_state=state)

    def int8_quant():
        import bitsandbytes.functional as F

        w = m_().randn(n, k, scale=k ** -0.5)
        return lambda: F.int8_vectorwise_quant(w)

    def int8_dequant():
        import bitsandbytes.functional as F

        codes, scales, _ = F.int8_vectorwise_quant(m_().randn(n, k, scale=k ** -0.5))
        return lambda: F.int8_vectorwise_dequant(codes, scales)

    def int8_matmul():
        import bitsandbytes as bnb

        m = m_()
        lin = bnb.nn.Linear8bitLt(k, n, bias=False, has_fp16_weights=False)
        lin.weight = bnb.nn.Int8Params(m.randn(n, k, scale=k ** -0.5).cpu().float(), requires_grad=False,
                                       has_fp16_weights=False)
        lin = lin.to(m.device)
        x = m.randn(T, k)
        return lambda: lin(x)

    shape_w, shape_mm = f"[{n},{k}]", f"[{T},{k}]x[{k},{n}]"
    dq = NF4_DOUBLE_QUANT
    return [
        OpCase("nf4 quantize (bnb)", shape_w, "fwd", "quant", opc.quantize(k, n, e, "nf4", dq), nf4_quant),
        OpCase("nf4 dequantize (bnb)", shape_w, "fwd", "quant", opc.dequantize(k, n, e, "nf4", dq), nf4_dequant),
        OpCase("nf4 matmul (bnb)", shape_mm, "fwd", "quant", opc.quant_linear(T, k, n, e, "nf4", dq), nf4_matmul),
        OpCase("int8 quantize (bnb)", shape_w, "fwd", "quant", opc.quantize(k, n, e, "int8-bnb"), int8_quant),
        OpCase("int8 dequantize (bnb)", shape_w, "fwd", "quant", opc.dequantize(k, n, e, "int8-bnb"), int8_dequant),
        OpCase("int8 matmul (bnb LLM.int8)", shape_mm, "fwd", "quant", opc.quant_linear(T, k, n, e, "int8-bnb"),
               int8_matmul),
    ]


def _torchao_case(m_: Callable[[], Maker], T: int, k: int, n: int, e: float) -> OpCase:
    def make():
        import torch
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        m = m_()
        lin = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).to(m.device, m.dtype)
        lin[0].weight.data.copy_(m.randn(n, k, scale=k ** -0.5))
        quantize_(lin, Int8WeightOnlyConfig())
        x = m.randn(T, k)
        return lambda: lin(x)
    return OpCase("int8 matmul (torchao weight-only)", f"[{T},{k}]x[{k},{n}]", "fwd", "quant",
                  opc.quant_linear(T, k, n, e, "int8-weight"), make)


def quant_cases(m_: Callable[[], Maker], spec: ModelSpec, T: int, e: float, dtype: str,
                device: str) -> tuple[list[OpCase], list[str]]:
    """(cases, reasons for those left out)."""
    k, n = spec.hidden_size, spec.intermediate_size
    cases: list[OpCase] = []
    skipped: list[str] = []
    if importlib.util.find_spec("bitsandbytes") is None:
        skipped.append("bitsandbytes NF4/int8: bitsandbytes is not installed")
    elif dtype == "fp16" and device == "cpu":
        skipped.append("bitsandbytes NF4/int8: fp16 is not supported on CPU")
    else:
        cases += _bnb_cases(m_, T, k, n, e)
    if importlib.util.find_spec("torchao") is None:
        skipped.append("torchao int8: torchao is not installed")
    else:
        cases.append(_torchao_case(m_, T, k, n, e))
    return cases, skipped
