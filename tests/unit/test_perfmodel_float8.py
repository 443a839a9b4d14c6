"""`--float8 tensorwise`: the layers' linears train in float8 (torchao's Float8Linear with
dynamic tensor-wise scales): their products at the device's FP8 peak, the casts of their
operands at the element-wise rate, the head in the compute dtype."""
from __future__ import annotations

from dataclasses import replace

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import layertime
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.request import build_estimate
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform


def test_cast_bytes_closed_form():
    # forward: amax (a read) and cast (a read, a one-byte write) of the input and the weight
    T, k, n, e = 8192, 4096, 14336, 2
    assert opc.float8_cast_bytes(T * k, k * n, T * n, e) == 5 * (T * k + k * n)
    # backward: dY for dX and its transposed copy for dW (scale reused), W and X cast again
    assert opc.float8_cast_bytes(T * k, k * n, T * n, e, "bwd") == 5 * (T * n + k * n + T * k) + 3 * T * n


def test_layer_casts_follow_the_tensor_parallel_split():
    c = machine_for(resolve_platform("h100", 1), "bf16").ceilings
    m, T, e = get_model("llama3-8b"), 8192, 2
    want = sum(opc.float8_cast_bytes(T * k, k * n, T * n, e) for k, n in layertime.layer_gemm_shapes(m))
    assert layertime.layer_float8_cast_time_s(c, m, T, e) == pytest.approx(layertime.memory_time_s(c, want, T))
    # under TP every rank casts 1/tp of each weight; the activations it casts depend on the split
    assert layertime.layer_float8_cast_time_s(c, m, T, e, tp=2) < layertime.layer_float8_cast_time_s(c, m, T, e)


def test_float8_products_run_at_the_fp8_peak():
    c = machine_for(resolve_platform("h100", 1), "bf16").ceilings
    m, T, e = get_model("llama3-8b"), 8192, 2
    layer_bytes = 2 * m.params_per_layer
    bf16 = layertime.layer_gemm_time_s(c, m, T, e, layer_bytes)
    fp8 = layertime.layer_gemm_time_s(replace(c, gemm_peak_scale=2.0), m, T, e, layer_bytes)
    # compute halves; the weights' read (gemm_unhidden_time_s) does not
    assert 0.5 * bf16 < fp8 < 0.6 * bf16


def _step(**kw):
    options = dict(model="llama3-8b", hardware="h100", gpus=8, zero=3, seq=8192, micro_batch=1, attn="flash",
                   recompute="full")
    options.update(kw)
    return build_estimate("pretrain", options)


def test_float8_step_is_faster_but_not_twice_and_keyed():
    plain, fp8 = _step(), _step(float8="tensorwise")
    ratio = fp8.metrics["time"]["step_s"] / plain.metrics["time"]["step_s"]
    assert 0.5 < ratio < 0.95  # attention, the head, the casts and the element-wise work stay
    assert fp8.config["float8"] == "tensorwise" and "float8" not in plain.config
    # torchao saves the high-precision input and weight: activation memory is unchanged
    assert fp8.metrics["memory"]["activations_bytes"] == plain.metrics["memory"]["activations_bytes"]


@pytest.mark.parametrize("kw,words", [
    (dict(hardware="a100"), "FP8 peak"),
    (dict(hardware="cpu", gpus=None, zero=0, attn="sdpa", seq=512, model="tiny-llama"), "FP8 peak"),
    (dict(float8="rowwise"), "float8"),
])
def test_float8_refusals(kw, words):
    options = dict(float8="tensorwise")
    options.update(kw)
    with pytest.raises(UserError, match=words):
        _step(**options)


def test_float8_with_lora_is_refused():
    with pytest.raises(UserError, match="LoRA"):
        build_estimate("finetune", dict(model="llama3-8b", hardware="h100", float8="tensorwise", lora_rank=8))
