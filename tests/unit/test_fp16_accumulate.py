"""`--accumulate fp16`: fp16 products accumulating in fp16 run at a GeForce part's doubled peak
(Ada whitepaper: RTX 4090 330.3 against 165.2 dense TFLOP/s; GA102 whitepaper: RTX 3090 142
against 71); a data-centre part catalogues none and runs as before."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel.ceilings import machine_for, with_accumulate
from llmdissect.perfmodel.request import build_estimate
from llmdissect.specs.hardware import resolve_platform


@pytest.mark.parametrize("hardware,ratio", [("rtx4090", 330.3 / 165.2), ("rtx3090", 142 / 71), ("a100", 1.0)])
def test_the_products_peak_scales_by_the_catalogued_ratio(hardware, ratio):
    mach = machine_for(resolve_platform(hardware), "fp16")
    assert with_accumulate(mach, "fp16").ceilings.gemm_peak_scale == pytest.approx(ratio)
    assert with_accumulate(mach, "fp32").ceilings.gemm_peak_scale == 1.0


def test_compute_bound_prefill_halves_and_decode_barely_moves():
    base = dict(model="llama2-7b", hardware="rtx4090", dtype="fp16", batch=32, input_len=1024)
    fp32 = build_estimate("infer", base).metrics["time"]
    fp16 = build_estimate("infer", dict(base, accumulate="fp16")).metrics["time"]
    assert 0.45 < fp16["ttft_s"] / fp32["ttft_s"] < 0.65
    assert fp16["tpot_s"] / fp32["tpot_s"] > 0.9  # reading the weights and the cache does not change
    assert build_estimate("infer", dict(base, accumulate="fp16")).config["accumulate"] == "fp16"


@pytest.mark.parametrize("kw", [dict(dtype="bf16"), dict(hardware="cpu", dtype="fp32", model="tiny-llama")])
def test_fp16_accumulate_needs_fp16_on_a_gpu(kw):
    options = dict(model="llama2-7b", hardware="rtx4090", dtype="fp16", accumulate="fp16")
    with pytest.raises(UserError, match="--accumulate fp16"):
        build_estimate("infer", dict(options, **kw))


def test_training_mfu_counts_against_the_peak_the_products_run_at():
    base = dict(model="llama2-7b", hardware="rtx4090", gpus=1, dtype="fp16", seq=2048, kernels="fused")
    fp32 = build_estimate("pretrain", base).metrics
    fp16 = build_estimate("pretrain", dict(base, accumulate="fp16")).metrics
    # faster, yet a smaller share of a peak twice as high
    assert fp16["tokens_per_s"] > fp32["tokens_per_s"]
    ratio = fp16["tokens_per_s"] / fp32["tokens_per_s"] / (330.3 / 165.2)
    assert fp16["mfu"] == pytest.approx(fp32["mfu"] * ratio, rel=1e-9)
