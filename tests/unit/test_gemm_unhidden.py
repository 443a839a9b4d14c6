"""A GPU product priced from its datasheet takes its compute time plus its weights' read, at
least all its bytes' time (roofline.gemm_unhidden_time_s); a CPU's, or a product a measured
grid prices, the longer of compute and memory. Closed forms, and the published first-token
latency the sum was checked against."""
from __future__ import annotations

import pytest

from llmdissect.api import estimate
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.roofline import Ceilings, gemm_time_s
from llmdissect.specs import resolve_platform

EFF = {"gemm": 0.5, "memory": 0.8, "weights": 0.5, "attention": 0.5, "comm": 0.8, "host_link": 0.8}


def _ceilings(asynchronous):
    return Ceilings(100e12, 1e12, EFF, asynchronous=asynchronous)


@pytest.mark.parametrize("rows", [1, 128, 100_000])
def test_a_gpu_adds_compute_and_the_weights_read_a_cpu_takes_the_longer(rows):
    k = n = 4096
    weights, io = 2.0 * k * n, 2.0 * rows * (k + n)
    flops, nbytes = 2.0 * rows * k * n, weights + io
    compute = flops / 50e12
    gpu = gemm_time_s(_ceilings(True), flops, nbytes, (rows, k, n), activation_bytes=io)
    assert gpu == pytest.approx(max(compute + weights / 0.5e12, nbytes / 0.5e12))
    cpu = _ceilings(False)
    assert gemm_time_s(cpu, flops, nbytes, (rows, k, n)) == pytest.approx(max(compute, nbytes / 0.5e12))


def test_a_gpu_product_never_beats_its_bytes():
    # 1 row: the weights and the activations together bound it, the compute is nothing
    flops, weights, io = 2.0 * 4096 * 4096, 2.0 * 4096 * 4096, 1e9
    t = gemm_time_s(_ceilings(True), flops, weights + io, (1, 4096, 4096), activation_bytes=io)
    assert t == pytest.approx((weights + io) / 0.5e12)


def test_the_sum_is_at_most_twice_the_longer_and_near_it_where_one_dominates():
    gpu, cpu = _ceilings(True), _ceilings(False)
    for rows in (1, 16, 64, 128, 512, 4096, 65536):
        flops, nbytes = 2.0 * rows * 4096 * 4096, 2.0 * 4096 * 4096
        shape = (rows, 4096, 4096)
        ratio = gemm_time_s(gpu, flops, nbytes, shape) / gemm_time_s(cpu, flops, nbytes, shape)
        assert 1.0 <= ratio <= 2.0
        if rows in (1, 65536):
            assert ratio < 1.05


def test_first_token_of_a_128_token_prompt_on_an_a100_against_tensorrt_llm():
    # TensorRT-LLM docs/source/performance.md (v0.5 data, "Low Latency", A100 FP16): Llama 7B,
    # batch 1, input 128: 16 ms to the first token. Compute alone (the max) priced it 10.5 ms.
    record = estimate("infer", model="llama2-7b", hardware="a100", batch=1, input_len=128, output_len=1,
                      dtype="fp16", attn="flash", cache="static", store=False)
    ttft = record.metrics["time"]["ttft_s"]
    assert 0.016 / 1.25 < ttft < 0.016 * 1.25


def test_a100_ceilings_are_asynchronous():
    assert machine_for(resolve_platform("a100"), "fp16").ceilings.asynchronous
