"""An FP8 KV cache (`--kv-dtype fp8`, vLLM's --kv-cache-dtype fp8): one byte a cached element.
Closed forms against the compute-dtype cache; refused on a CPU; the API passes it through."""
from __future__ import annotations

import pytest

import llmdissect
from llmdissect.errors import UserError
from llmdissect.perfmodel import kvcache
from llmdissect.perfmodel.request import estimate_request, run_estimate
from llmdissect.specs import get_model

OPTS = dict(model="llama2-7b", hardware="a100", dtype="fp16", batch=64, input_len=128, output_len=2048)


def _infer(**kw):
    return run_estimate(estimate_request("infer", **OPTS, **kw), calibration=None).metrics


def test_the_cache_holds_one_byte_an_element():
    fp16, fp8 = _infer(), _infer(kv_dtype="fp8")
    m = get_model("llama2-7b")
    positions = kvcache.generate_positions(128, 2048)
    # 2 (K, V) x layers x kv heads x head_dim x positions x batch, at 2 bytes and at 1
    full = 2 * m.num_layers * m.num_kv_heads * m.head_dim * positions * 64
    assert fp16["memory"]["kv_cache_bytes"] == pytest.approx(2 * full)
    assert fp8["memory"]["kv_cache_bytes"] == pytest.approx(full)
    # twice the sequences fit beside the weights (the prefill working set aside)
    assert fp8["max_batch"] >= 2 * fp16["max_batch"] - 1


def test_decode_reads_half_the_cache_and_prefill_is_unchanged():
    fp16, fp8 = _infer(cache="static"), _infer(kv_dtype="fp8", cache="static")
    assert fp8["time"]["ttft_s"] == pytest.approx(fp16["time"]["ttft_s"])
    assert fp8["time"]["tpot_s"] < fp16["time"]["tpot_s"]
    # at batch 64 and ~1 K positions the cache is as large as the weights: most of the gap
    m = get_model("llama2-7b")
    ctx = 128 + 2048 / 2
    saved = kvcache.kv_cache_bytes(m, 64, ctx, 1, 1) / 2.039e12  # bytes no longer read, at the datasheet rate
    assert fp16["time"]["tpot_s"] - fp8["time"]["tpot_s"] >= saved


def test_the_estimate_records_the_cache_dtype_only_when_it_departs():
    assert "kv_dtype" not in run_estimate(estimate_request("infer", **OPTS)).config
    assert run_estimate(estimate_request("infer", **OPTS, kv_dtype="fp8")).config["kv_dtype"] == "fp8"


def test_a_serving_engine_holds_twice_the_blocks():
    from llmdissect.analysis.serve_estimate import run_serve_estimate

    kw = dict(model="llama2-7b", hardware="a100", dtype="fp16", input_len=64, output_len=16, num_prompts=8)
    fp16 = run_serve_estimate(estimate_request("serve", **kw), profile={}).metrics["engine"]["kv_blocks"]
    fp8 = run_serve_estimate(estimate_request("serve", **kw, kv_dtype="fp8"), profile={}).metrics["engine"]["kv_blocks"]
    assert fp8 in (2 * fp16, 2 * fp16 + 1)


def test_cpu_and_unknown_values_are_refused_in_one_line():
    with pytest.raises(UserError, match="GPU engine"):
        run_estimate(estimate_request("infer", model="tiny-llama", hardware="cpu", kv_dtype="fp8"))
    with pytest.raises(UserError, match="unknown --kv-dtype 'int4'"):
        _infer(kv_dtype="int4")
    with pytest.raises(UserError, match="does not apply"):
        estimate_request("pretrain", model="llama2-7b", hardware="a100", kv_dtype="fp8")


def test_the_api_passes_the_cache_dtype_and_the_group_size():
    rec = llmdissect.estimate("infer", **OPTS, kv_dtype="fp8", quant="int4-weight", group_size=32, store=False)
    assert rec.config["kv_dtype"] == "fp8" and rec.config["group_size"] == 32
