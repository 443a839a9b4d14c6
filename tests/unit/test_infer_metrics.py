"""Offline-inference metric formulas (docs/metrics.md, "Inference") and grid validation."""
import pytest

from llmdissect.errors import UserError
from llmdissect.specs import get_model
from llmdissect.workloads.infer_launch import expand_grid, parse_list, skip_reason
from llmdissect.workloads.infer_metrics import (
    CallTiming,
    ceilings,
    decode_kv_positions_read,
    hardware_allows,
    kv_cache_bytes_formula,
    prefill_flops,
    summarise,
)


def test_summarise_follows_the_definitions():
    # two calls of 4 output tokens, batch 2, prompt 8: first token at 0.1 s, then 0.05 s steps
    calls = [CallTiming([0.1, 0.15, 0.2, 0.25], 0.26), CallTiming([0.2, 0.25, 0.3, 0.35], 0.36)]
    m = summarise(calls, batch=2, input_len=8, output_len=4)
    assert m["ttft_s"]["median"] == pytest.approx(0.15)
    assert m["e2e_latency_s"]["samples"] == [0.26, 0.36]
    assert m["tpot_s"]["samples"] == pytest.approx([(0.26 - 0.1) / 3, (0.36 - 0.2) / 3])
    assert m["prefill_tokens_per_s"]["samples"] == pytest.approx([2 * 8 / 0.1, 2 * 8 / 0.2])
    assert m["decode_tokens_per_s"]["median"] == pytest.approx(2 * 3 / 0.15)
    assert m["decode_step_s"]["n"] == 6 and m["decode_step_s"]["median"] == pytest.approx(0.05)
    c = m["consistency"]
    assert c["predicted_e2e_s"] == pytest.approx(0.15 + 3 * 0.05) and c["ok"]


def test_consistency_flags_timing_that_does_not_add_up():
    calls = [CallTiming([0.1, 0.11, 0.12, 0.13], 1.0)]  # the call returns long after its last token
    m = summarise(calls, batch=1, input_len=4, output_len=4)
    assert not m["consistency"]["ok"] and m["consistency"]["relative_error"] > 0.8


def test_one_output_token_has_no_tpot():
    m = summarise([CallTiming([0.1], 0.1)], batch=1, input_len=4, output_len=1)
    assert "tpot_s" not in m and "decode_tokens_per_s" not in m and m["ttft_s"]["median"] == 0.1


def test_kv_formula_and_prefill_flops_for_debug_llama():
    spec = get_model("debug-llama")  # 2 layers, 2 kv heads, head_dim 16
    assert kv_cache_bytes_formula(spec, batch=3, length=10, bytes_per_value=4) == 2 * 2 * 3 * 10 * 2 * 16 * 4
    n_head = spec.vocab_size * spec.hidden_size
    n_body = spec.params_matmul - n_head
    expected = 2 * 16 * (2 * n_body + 4 * 2 * 64 * 16) + 2 * 2 * n_head
    assert prefill_flops(spec, batch=2, input_len=16) == expected
    assert decode_kv_positions_read(100, 20, None) == 110
    assert decode_kv_positions_read(100, 20, 119) == 119


def test_hardware_allows_fractions_and_not_measured():
    hw = hardware_allows(weights_read_bytes=1000, kv_bytes_per_position=10, kv_positions_read=50, decode_step_s=0.001,
                         prefill_flops_value=1e9, ttft_s=0.5, memory_bandwidth_bytes_per_s=3e6,
                         peak_flops_per_s=4e9, source="x")
    assert hw["decode_bytes_per_step"] == 1500 and hw["decode_bandwidth_bytes_per_s"] == pytest.approx(1.5e6)
    assert hw["decode_bandwidth_fraction"] == pytest.approx(0.5) and hw["prefill_peak_fraction"] == pytest.approx(0.5)
    hw = hardware_allows(weights_read_bytes=1000, kv_bytes_per_position=10, kv_positions_read=50, decode_step_s=0.001,
                         prefill_flops_value=1e9, ttft_s=0.5, memory_bandwidth_bytes_per_s=None,
                         peak_flops_per_s=None, source="not measured")
    assert hw["decode_bandwidth_fraction"] is None and hw["prefill_peak_fraction"] is None


def test_ceilings_cpu_measured_or_not_and_gpu_by_name():
    assert ceilings("cpu", "cpu", "fp32", {})[2].startswith("not measured")
    profile = {"cpu": {"peak_flops_per_s": {"fp32": 1e11}, "memory_bandwidth_bytes_per_s": 2e10}}
    bw, peak, source = ceilings("cpu", "cpu", "fp32", profile)
    assert (bw, peak) == (2e10, 1e11) and "measured" in source
    bw, peak, source = ceilings("cuda", "NVIDIA H200", "bf16", {})
    assert bw == 4.8e12 and peak == 989.4e12 and "H200" in source
    assert ceilings("cuda", "NVIDIA GeForce RTX 4090", "fp32", {})[2].startswith("catalogue: RTX-4090")
    assert ceilings("cuda", "Tesla T4", "fp32", {})[0] is None
    measured = {"gpus": {"Tesla T4": {"memory_bandwidth_bytes_per_s": 3e11, "peak_flops_per_s": {"fp32": 8e12}}}}
    assert ceilings("cuda", "Tesla T4", "fp32", measured)[:2] == (3e11, 8e12)


def test_parse_list():
    assert parse_list("1, 2,4,2", "--batch") == [1, 2, 4]
    assert parse_list("none,nf4", "--quant", str) == ["none", "nf4"]
    for bad in ("", "0", "a", "1,-2"):
        with pytest.raises(UserError):
            parse_list(bad, "--batch")


def _grid(**kw):
    args = dict(model="debug-llama", batch=[1, 2], input_len=[8, 16], output_len=[4], dtype="fp32", attn="sdpa",
                cache=["dynamic", "static"], quant=["none"], compile=False, warmup=1, repeats=2, device="cpu")
    args.update(kw)
    return expand_grid(**args)


def test_grid_expands_every_combination_with_the_shared_keys():
    points = _grid()
    assert len(points) == 8
    keys = {"model", "hardware", "batch", "input_len", "output_len", "dtype", "attn", "cache", "quant", "compile"}
    assert all(keys <= set(p.to_config()) and p.hardware == "cpu" for p in points)
    assert {(p.batch, p.input_len, p.cache) for p in points} == {
        (b, i, c) for b in (1, 2) for i in (8, 16) for c in ("dynamic", "static")}


@pytest.mark.parametrize("kw, fragment", [
    (dict(cache=["paged"]), "unknown cache"), (dict(quant=["int3"]), "unknown quantization"),
    (dict(dtype="fp64"), "dtype"), (dict(attn="xformers"), "unknown attention"),
    (dict(input_len=[510]), "max_position_embeddings"), (dict(repeats=0), "--repeats"),
    (dict(model="no-such-model"), "unknown model"),
])
def test_grid_rejects_bad_input(kw, fragment):
    with pytest.raises(UserError, match=fragment):
        _grid(**kw)


def test_the_group_size_reaches_the_int4_points_alone_and_names_only_a_departure():
    none, int4 = _grid(batch=[1], input_len=[8], cache=["dynamic"], quant=["none", "int4-weight"], group_size=32)
    assert int4.to_config()["group_size"] == 32 and "group_size" not in none.to_config()
    [default] = _grid(batch=[1], input_len=[8], cache=["dynamic"], quant=["int4-weight"], group_size=128)
    assert "group_size" not in default.to_config()  # torchao's default, as an estimate's config leaves it
    with pytest.raises(UserError, match="int4-weight takes"):
        _grid(quant=["int4-weight"], group_size=48)
    with pytest.raises(UserError, match="applies to --quant int4-weight"):
        _grid(quant=["nf4"], group_size=64)


def test_a_measured_group_size_pairs_with_the_estimate_of_that_group_size():
    from llmdissect.analysis.predict import estimate_options, join_key
    from llmdissect.perfmodel.config import InferSetup
    from llmdissect.specs import get_model, resolve_platform

    measured = {"model": "llama2-7b", "hardware": "cpu", "batch": 1, "input_len": 8, "output_len": 4,
                "dtype": "bf16", "attn": "sdpa", "cache": "dynamic", "quant": "int4-weight", "compile": False,
                "group_size": 32}
    est = InferSetup(get_model("llama2-7b"), resolve_platform("cpu"), dtype="bf16", batch=1, input_len=8,
                     output_len=4, quant="int4-weight", group_size=32).config()
    assert join_key("infer", measured) == join_key("infer", est)
    assert join_key("infer", {**measured, "group_size": None}) != join_key("infer", est)
    assert estimate_options("infer", measured)[1]["group_size"] == 32


def test_skip_reasons_on_cpu():
    [p] = _grid(batch=[1], input_len=[8], cache=["dynamic"])
    assert skip_reason(p) is None

    def but(**kw):
        return p.model_copy(update=kw)

    assert "CUDA" in skip_reason(but(attn="flash"))
    assert "CUDA" in skip_reason(but(quant="int4-weight"))
    assert skip_reason(but(quant="nf4", dtype="fp16")) is None  # bitsandbytes >= 0.45 runs it on CPU
    assert "CUDA" in skip_reason(but(quant="int4-weight", dtype="bf16"))
    assert skip_reason(but(quant="nf4")) is None and skip_reason(but(quant="int8-dynamic")) is None


def test_quick_suite_lists_the_infer_step():
    from llmdissect.suites.quick import quick_steps
    from llmdissect.suites.quick_infer import quick_points

    assert "infer" in [s.name for s in quick_steps()]
    points = quick_points()
    assert {p.quant for p in points} == {"none", "int8-weight"} and {p.input_len for p in points} == {32, 128}
    assert len({p.batch for p in points}) >= 2 and all(p.model == "tiny-llama" for p in points)
    # a median that one slow call cannot move: at least three timed calls a point
    assert all(p.repeats >= 3 and p.warmup >= 1 for p in points)
