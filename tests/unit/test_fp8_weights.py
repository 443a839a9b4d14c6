"""FP8 weights and activations (W8A8, per-tensor scale) in the inference estimate."""
import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel.request import build_estimate
from llmdissect.perfmodel.weights import linear_weight_bytes, model_weight_bytes
from llmdissect.specs import get_model


def test_fp8_stores_one_byte_per_weight_and_one_fp32_scale_per_tensor():
    assert linear_weight_bytes(4096, 11008, "fp8", 2) == 4096 * 11008 + 4
    m = get_model("llama2-7b")
    linear = 7 * 4  # seven linears a layer, one scale each
    half = model_weight_bytes(m, "none", 2) - model_weight_bytes(m, "fp8", 2)
    # the decoder linears lose one byte per weight; the embedding and head stay bf16
    assert half == pytest.approx(m.num_layers * (4 * 4096 * 4096 + 3 * 4096 * 11008) - m.num_layers * linear)


def test_fp8_gemms_run_at_the_fp8_peak_and_mfu_counts_it():
    kw = dict(model="llama2-7b", hardware="h100", batch=8, input_len=2048, output_len=2)
    bf16 = build_estimate("infer", kw, calibration=None).metrics
    fp8 = build_estimate("infer", {**kw, "quant": "fp8"}, calibration=None).metrics
    # prefill of 16K tokens is compute-bound: the GEMMs take half the time, attention does not change
    ratio = fp8["time"]["ttft_s"] / bf16["time"]["ttft_s"]
    assert 0.5 < ratio < 0.75
    assert 0 < fp8["mfu"] < bf16["mfu"]  # against the FP8 peak, twice bf16's on an H100


def test_fp8_needs_a_device_with_an_fp8_peak_and_is_inference_only():
    with pytest.raises(UserError, match="FP8 peak; A100-80G-SXM has none"):
        build_estimate("infer", dict(model="llama2-7b", hardware="a100", quant="fp8"))
    with pytest.raises(UserError, match="inference option|--lora-rank"):
        build_estimate("finetune", dict(model="llama2-7b", hardware="h100", quant="fp8", lora_rank=8))
