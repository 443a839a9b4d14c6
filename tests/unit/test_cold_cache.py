"""A forward that streams more than a CPU's last-level cache pays its fixed costs cold
(layertime.cold_cache_scale, issue 16): closed forms, no timing."""
from __future__ import annotations

import numpy as np
import pytest

from llmdissect.perfmodel import layertime as lt
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import InferSetup
from llmdissect.perfmodel.estimate import estimate_infer
from llmdissect.perfmodel.roofline import Ceilings
from llmdissect.perfmodel.servestep import IterationTime
from llmdissect.specs import get_model, resolve_platform

EFF = {"gemm": 1, "attention": 1, "memory": 1}
MB = 2**20


def ceilings(**kw) -> Ceilings:
    return Ceilings(1e30, 1e30, EFF, **{"op_fixed_s": 20e-6, "op_fixed_cold_s": 50e-6, "cache_bytes": 32 * MB, **kw})


def test_the_scale_runs_from_the_hot_cost_to_the_cold_one_over_the_probes_eviction():
    # the probe's cold cost is measured after a read of twice the cache: the scale reaches it there
    c = ceilings()
    assert lt.cold_cache_scale(c, 0) == 1.0
    assert lt.cold_cache_scale(c, 32 * MB) == pytest.approx(1 + 1.5 / 2)  # one cache: halfway to 2.5x
    assert lt.cold_cache_scale(c, 64 * MB) == pytest.approx(2.5)
    assert lt.cold_cache_scale(c, 1e12) == pytest.approx(2.5)  # no colder than the probe's cold
    arr = lt.cold_cache_scale(c, np.array([0.0, 32 * MB, 128 * MB]))  # the array-friendly estimate path
    assert arr == pytest.approx([1.0, 1.75, 2.5])


@pytest.mark.parametrize("kw", [{"asynchronous": True}, {"op_fixed_cold_s": 0.0}, {"cache_bytes": 0.0},
                                {"op_fixed_cold_s": 10e-6}])
def test_no_scale_on_a_gpu_or_where_the_cold_cost_or_the_cache_was_not_measured(kw):
    # a GPU's kernels stream device memory; a cold cost under the hot one is noise, not a cost
    assert lt.cold_cache_scale(ceilings(**kw), 1e12) == 1.0


def test_every_fixed_cost_of_a_forward_scales_and_nothing_else():
    c = ceilings(forward_fixed_s=1e-3, cache_update_s=40e-6, generate_step_s=0.3e-3, generate_call_s=1e-3,
                 serve_engine_step_s=0.2e-3, serve_engine_layer_s=10e-6, serve_engine_seq_s=5e-6,
                 optimizer_tensor_s=7e-6)
    cold = lt.with_cold_caches(c, 128 * MB)
    for key in lt.FORWARD_FIXED_COSTS:
        assert getattr(cold, key) == pytest.approx(2.5 * getattr(c, key)), key
    assert cold.optimizer_tensor_s == c.optimizer_tensor_s  # a training step's optimizer is not a forward
    assert cold.op_fixed_cold_s == c.op_fixed_cold_s and cold.peak_flops_per_s == c.peak_flops_per_s
    assert lt.with_cold_caches(c, 0) is c


HUGE = {"peak_flops_per_s": {"fp32": 1e30}, "memory_bandwidth_bytes_per_s": 1e30, "op_fixed_s": 50e-6,
        "forward_fixed_s": 1e-3, "generate_step_s": 0.5e-3, "generate_call_s": 2e-3, "cache_update_s": 40e-6}


def _times(profile):
    m = get_model("tiny-llama")
    plat = resolve_platform("cpu")
    setup = InferSetup(model=m, platform=plat, batch=1, input_len=16, output_len=8, dtype="fp32")
    return estimate_infer(setup, machine_for(plat, "fp32", {"cpu": profile})).metrics["time"]


def test_tiny_llama_streams_more_than_a_small_cache_and_pays_every_fixed_cost_cold():
    # tiny-llama's fp32 forward reads ~50 MB of weights: past a 1 MB cache, every fixed cost of
    # its forwards doubles with a cold cost twice the hot one
    hot = 6 * (14 * 50e-6 + 40e-6)
    t = _times({**HUGE, "op_fixed_cold_s": 100e-6, "last_level_cache_bytes": MB})
    assert t["tpot_s"] == pytest.approx(2 * (hot + 1e-3 + 0.5e-3), rel=1e-6)
    assert t["ttft_s"] == pytest.approx(2 * (hot + 1e-3 + 2e-3), rel=1e-6)
    # with a cache far larger than the model the costs stay (all but) hot
    t = _times({**HUGE, "op_fixed_cold_s": 100e-6, "last_level_cache_bytes": 1e15})
    assert t["tpot_s"] == pytest.approx(hot + 1e-3 + 0.5e-3, rel=1e-4)
    # and without a cold measurement they are the hot ones exactly
    assert _times(HUGE)["tpot_s"] == pytest.approx(hot + 1e-3 + 0.5e-3, rel=1e-9)


def test_a_serving_iteration_pays_its_fixed_costs_cold_by_the_bytes_it_streams():
    m = get_model("tiny-llama")
    profile = {**HUGE, "serve_engine_step_s": 2e-4, "serve_engine_seq_s": 4e-5}
    hot = IterationTime(m, machine_for(resolve_platform("cpu"), "fp32", {"cpu": profile}), 4, 1, 1e6,
                        engine_measured=True)
    cold = IterationTime(m, machine_for(resolve_platform("cpu"), "fp32",
                                        {"cpu": {**profile, "op_fixed_cold_s": 100e-6, "last_level_cache_bytes": 1}}),
                         4, 1, 1e6, engine_measured=True)
    fixed = 6 * (14 * 50e-6 + 40e-6) + 1e-3 + 2e-4 + 3 * 4e-5
    assert hot(3, 64, 0, 0, 3, seqs=3) == pytest.approx(fixed, rel=1e-6)
    assert cold(3, 64, 0, 0, 3, seqs=3) == pytest.approx(2 * fixed, rel=1e-6)


def test_advise_rows_on_a_cpu_with_cold_costs_equal_the_scalar_estimate():
    # the vectorized search scales the fixed costs per row (arrays through cold_cache_scale)
    from llmdissect.perfmodel.advise import infer_space

    plat = resolve_platform("cpu")
    profile = {"cpu": {"peak_flops_per_s": {"fp32": 1e11}, "memory_bandwidth_bytes_per_s": 2e10,
                       "op_fixed_s": 20e-6, "op_fixed_cold_s": 40e-6, "forward_fixed_s": 3e-4, "cache_update_s": 4e-5,
                       "generate_step_s": 3e-4, "generate_call_s": 1e-3, "last_level_cache_bytes": 32 * MB}}
    mach = machine_for(plat, "fp32", profile)
    m = get_model("tiny-llama")
    space = infer_space(m, mach, 128, 32, 4)
    for i in range(0, len(space), 5):
        row = space.row(i)
        setup = InferSetup(model=m, platform=plat, batch=row["batch"], input_len=128, output_len=32, dtype="fp32",
                           attn=row["attn"], quant=row["quant"], tp=row["tp"])
        t = estimate_infer(setup, mach).metrics["time"]
        assert t["tpot_s"] == pytest.approx(row["tpot_s"], rel=1e-9)
        assert t["ttft_s"] == pytest.approx(row["ttft_s"], rel=1e-9)
    # tiny-llama streams more than half the 32 MiB cache in every row: each pays colder costs
    hot = {"cpu": {k: v for k, v in profile["cpu"].items() if k != "op_fixed_cold_s"}}
    hot_space = infer_space(m, machine_for(plat, "fp32", hot), 128, 32, 4)
    assert np.all(space.results["tpot_s"] > hot_space.results["tpot_s"])


def test_peak_prints_the_fixed_costs_hot_and_cold():
    from llmdissect.cli.peak_cmd import fixed_costs_line

    line = fixed_costs_line({"op_fixed_s": 16.4e-6, "op_fixed_cold_s": 31.2e-6, "cache_update_s": 40e-6,
                             "forward_fixed_s": 290e-6, "generate_step_s": 305e-6, "generate_call_s": 1.06e-3})
    assert line == ("fixed costs: 16.4 us an operator (31.2 us with the caches emptied first), 40 us a KV-cache "
                    "update, 290 us a forward outside its layers, 305 us a generate step outside the model, "
                    "1.06 ms a generate call")
    assert fixed_costs_line({}) == "" and "emptied" not in fixed_costs_line({"op_fixed_s": 5e-6})
