"""Quantized weight bytes vs the real storage of bitsandbytes and torchao modules on CPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmdissect.perfmodel import weights as wt  # noqa: E402
from llmdissect.specs import get_model  # noqa: E402

SHAPES = [(176, 64), (1024, 384), (128, 384), (384, 1024)]  # (out, in) of debug/tiny-llama linears


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))


@pytest.mark.parametrize("out_f,in_f", SHAPES)
@pytest.mark.parametrize("double_quant", [True, False])
def test_nf4_bytes_match_bitsandbytes(out_f, in_f, double_quant):
    bnb = pytest.importorskip("bitsandbytes")
    lin = bnb.nn.Linear4bit(in_f, out_f, bias=False, compute_dtype=torch.float32, quant_type="nf4",
                            compress_statistics=double_quant)
    lin.weight = bnb.nn.Params4bit(torch.randn(out_f, in_f), requires_grad=False, quant_type="nf4",
                                   compress_statistics=double_quant)
    lin = lin.to("cpu")  # moving the parameter quantizes it
    state = lin.weight.quant_state
    real = _nbytes([lin.weight.data, *state.as_dict(packed=False).values()])
    assert real == wt.nf4_bytes(out_f * in_f, double_quant)


@pytest.mark.parametrize("out_f,in_f", SHAPES[:2])
def test_bench_ops_nf4_layout_is_what_its_cost_counts(out_f, in_f):
    # `bench ops` quantizes with bitsandbytes.functional.quantize_4bit; its rows count wt.nf4_bytes
    pytest.importorskip("bitsandbytes")
    import bitsandbytes.functional as F

    from llmdissect.micro.ops_quant import NF4_DOUBLE_QUANT

    codes, state = F.quantize_4bit(torch.randn(out_f, in_f), blocksize=wt.NF4_BLOCK,
                                   compress_statistics=NF4_DOUBLE_QUANT, quant_type="nf4")
    assert _nbytes([codes, *state.as_dict(packed=False).values()]) == wt.nf4_bytes(out_f * in_f, NF4_DOUBLE_QUANT)


@pytest.mark.parametrize("out_f,in_f", SHAPES)
def test_int8_bytes_match_bitsandbytes_llm_int8(out_f, in_f):
    bnb = pytest.importorskip("bitsandbytes")
    lin = bnb.nn.Linear8bitLt(in_f, out_f, bias=False, has_fp16_weights=False, threshold=0.0)
    lin.weight = bnb.nn.Int8Params(torch.randn(out_f, in_f), requires_grad=False, has_fp16_weights=False)
    lin = lin.to("cpu")
    assert lin.weight.dtype == torch.int8
    assert _nbytes([lin.weight.data, lin.weight.SCB]) == wt.int8_bnb_bytes(out_f, in_f)


@pytest.mark.parametrize("out_f,in_f", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_int8_bytes_match_torchao_storage(out_f, in_f, dtype):
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    m = torch.nn.Sequential(torch.nn.Linear(in_f, out_f, bias=False)).to(getattr(torch, dtype))
    quantize_(m, Int8WeightOnlyConfig())
    w = m[0].weight
    names, _ = w.__tensor_flatten__()
    assert _nbytes([getattr(w, n) for n in names]) == wt.int8_torchao_bytes(out_f, in_f)


@pytest.mark.parametrize("quant", ["nf4", "int8-bnb", "int8-weight"])
def test_whole_model_weight_bytes_match_the_quantized_model(quant):
    from llmdissect.modeling import build_model
    from llmdissect.techniques.quantization import apply_quantization, weight_bytes

    spec = get_model("debug-llama")
    model = apply_quantization(build_model(spec), quant)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # RoPE inv_freq, not weights
    assert weight_bytes(model) - buffers == wt.model_weight_bytes(spec, quant, 4)


def test_unquantized_model_bytes_are_params_times_dtype():
    spec = get_model("tiny-llama")
    assert wt.model_weight_bytes(spec, "none", 2) == spec.params * 2
    head_and_embedding = 2 * spec.params_embedding * 2  # stay in bf16
    nf4 = wt.model_weight_bytes(spec, "nf4", 2)
    assert head_and_embedding < nf4 < head_and_embedding + (spec.params - 2 * spec.params_embedding) * 2 * 0.3
