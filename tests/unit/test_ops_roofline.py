"""Rows against their roofline, efficiencies in the keys perfmodel reads, the theoretical
CPU peak, and module categories (no child processes)."""
import pytest

from llmdissect.measure.stats import Stats
from llmdissect.micro.ops_cases import OpCase
from llmdissect.micro.ops_child import bandwidth_ceiling, efficiencies, place_rows, raw_row
from llmdissect.micro.ops_launch import profile_update
from llmdissect.micro.peak import theoretical_cpu_peak
from llmdissect.perfmodel import op_costs as opc
from llmdissect.workloads.dissect_attr import module_category


def _row(op, cls, cost, t, dtype="fp32", passes="fwd"):
    return raw_row(OpCase(op, "s", passes, cls, cost, lambda: None, dtype), Stats.of([t, t, t]))


def test_every_fraction_is_in_0_1_even_when_a_row_beats_the_measured_ceilings():
    rows = [_row("gemm", "gemm", opc.Cost(2e9, 1e6), 0.01),          # 200 GFLOP/s: above the 100 peak
            _row("norm", "memory", opc.Cost(1e3, 1e5), 1e-5),         # 10 GB/s from cache
            _row("big", "memory", opc.Cost(1e3, 1e9), 1.0),           # 1 GB/s from DRAM
            _row("ce", "memory", opc.Cost(1e6, 1e7), 1e-3, dtype="bf16")]
    ladder = [(64e3, 50e9), (1e6, 20e9)]
    raised = place_rows(rows, {"fp32": 100e9, "bf16": 50e9}, ladder, 5e9)
    for r in rows:
        assert 0 < r["peak_fraction"] <= 1
    assert rows[0]["peak_fraction"] == 1 and any("gemm" in s for s in raised)
    assert rows[1]["bandwidth_ceiling_bytes_per_s"] == 20e9  # 100 kB moved: the 1 MB copy's rate, not 64 kB's
    assert rows[1]["peak_fraction"] == pytest.approx(0.5)
    assert rows[2]["bandwidth_ceiling_bytes_per_s"] == 5e9 and rows[2]["peak_fraction"] == pytest.approx(0.2)
    assert rows[0]["bound"] == "compute" and rows[2]["bound"] == "memory"


def test_bandwidth_ceiling_uses_the_smallest_level_that_holds_the_bytes():
    ladder = [(1e4, 100e9), (1e6, 40e9), (1e8, 8e9)]
    assert bandwidth_ceiling(5e3, ladder, 6e9) == 100e9
    assert bandwidth_ceiling(5e5, ladder, 6e9) == 40e9
    assert bandwidth_ceiling(1e9, ladder, 6e9) == 6e9


def test_efficiencies_are_time_weighted_fractions_perfmodel_accepts():
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.specs.hardware import local_cpu, resolve_platform

    rows = [_row("q", "gemm", opc.Cost(1e9, 1e6), 0.02), _row("up", "gemm", opc.Cost(3e9, 1e6), 0.04),
            _row("attention flash", "attention", opc.Cost(1e8, 1e5), 0.01),
            _row("attention math", "attention", opc.Cost(1e8, 1e5), 0.02),
            _row("norm", "memory", opc.Cost(0, 4e8), 0.1),
            _row("norm", "memory", opc.Cost(0, 4e8), 1.0, passes="bwd")]  # left out: forward rows only
    ceil = {"peak_flops_per_s": {"fp32": 100e9}, "memory_bandwidth_bytes_per_s": 8e9}
    place_rows(rows, ceil["peak_flops_per_s"], [], 8e9)
    eff = efficiencies(rows, ceil)
    assert eff["gemm"] == pytest.approx(4e9 / 0.06 / 100e9)
    assert eff["attention"] == pytest.approx(1e8 / 0.01 / 100e9)  # the fastest fused backend
    assert eff["memory"] == pytest.approx(0.5)
    assert [f for f, _ in eff["gemm_by_flops"]] == [1e9, 3e9]

    class Rec:
        id, config = "r1", {"model": "m", "tokens": 8, "dtype": "fp32", "device": "cpu"}
        metrics = {"efficiency": eff, "ceilings": {"device_name": "cpu"}}
    update = profile_update(Rec())
    profile = {**update, "cpu": {**update["cpu"], "peak_flops_per_s": {"fp32": 1e11},
                                 "memory_bandwidth_bytes_per_s": 8e9}}
    mach = machine_for(resolve_platform("cpu"), "fp32", profile)
    assert mach.sources["efficiency"] == "calibration profile"
    assert mach.efficiency["gemm"] == pytest.approx(eff["gemm"])
    assert local_cpu(profile).efficiency["memory"] == pytest.approx(0.5)


def test_grouped_expert_efficiency_by_rows_goes_to_the_profile_and_the_estimate():
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.perfmodel.roofline import experts_gemm_time_s
    from llmdissect.specs.hardware import resolve_platform

    rows = [_row("up", "gemm", opc.Cost(3e9, 1e6), 0.04),
            _row("routed experts", "experts", opc.Cost(2e9, 1e6), 0.1),  # 20 % of 100 GFLOP/s
            _row("routed experts", "experts", opc.Cost(2e8, 1e6), 0.04)]  # 5 %
    rows[1]["rows_per_expert"], rows[2]["rows_per_expert"] = 64, 8  # what ops_cases gives each row
    ceil = {"peak_flops_per_s": {"fp32": 100e9}, "memory_bandwidth_bytes_per_s": 8e9}
    place_rows(rows, ceil["peak_flops_per_s"], [], 8e9)
    eff = efficiencies(rows, ceil)
    assert eff["experts_by_rows"] == [[8, pytest.approx(0.05)], [64, pytest.approx(0.2)]]
    assert eff["gemm"] == pytest.approx(0.75)  # the experts' rows are their own class

    class Rec:
        id, config = "r1", {"model": "m", "tokens": 8, "dtype": "fp32", "device": "cpu"}
        metrics = {"efficiency": eff, "ceilings": {"device_name": "cpu"}}
    update = profile_update(Rec())
    profile = {**update, "cpu": {**update["cpu"], "peak_flops_per_s": {"fp32": 1e11},
                                 "memory_bandwidth_bytes_per_s": 1e30}}
    c = machine_for(resolve_platform("cpu"), "fp32", profile).ceilings
    assert c.experts_efficiency_by_rows == ((8.0, 0.05), (64.0, 0.2))
    assert experts_gemm_time_s(c, 1e9, 0, 64) == pytest.approx(1e9 / (1e11 * c.gemm_peak_scale * 0.2))
    assert experts_gemm_time_s(c, 1e9, 0, 128) == pytest.approx(1e9 / (1e11 * c.gemm_peak_scale * 0.2))  # flat above
    assert experts_gemm_time_s(c, 1e9, 0, 1) is None  # decode's single tokens: left to the GEMM grid
    mid = 1e9 / experts_gemm_time_s(c, 1e9, 0, 8 * 64 ** 0.5 / 8 ** 0.5 * 1.0) / (1e11 * c.gemm_peak_scale)
    assert 0.05 < mid < 0.2  # log-linear between


def test_theoretical_peak_from_flags_and_clock():
    info = {"flags": "sse avx avx2 fma avx512f", "cpu MHz": "2000.0"}
    t = theoretical_cpu_peak(cores=4, info=info)
    assert t["flops_per_s"]["fp32"] == 4 * 16 * 2 * 2 * 2.0e9  # cores x lanes x FMA x units x clock
    assert any("upper bound" in a for a in t["assumptions"])
    avx2 = theoretical_cpu_peak(cores=2, info={"flags": "avx avx2 fma", "cpu MHz": "3000"})
    assert avx2["flops_per_s"]["fp32"] == 2 * 8 * 2 * 2 * 3e9
    assert theoretical_cpu_peak(cores=2, info={"flags": "sse2"})["flops_per_s"] == {}  # no clock: unknown


@pytest.mark.parametrize("name,category", [
    ("model.embed_tokens", "embedding"), ("model.layers.3.self_attn.k_proj", "attention projections"),
    ("model.layers.0.self_attn", "attention core"), ("model.layers.1.mlp", "MLP"),
    ("model.layers.1.input_layernorm", "norms"), ("model.norm", "norms"), ("lm_head", "output head"),
    ("", "loss"), ("model.layers.2", "other"), ("model.layers.0.mlp.gate_proj", None),
    ("model.layers.0.self_attn.q_proj.lora_A", None)])
def test_module_categories(name, category):
    assert module_category(name) == category


def test_memory_efficiency_falls_back_to_backward_rows_where_no_forward_was_timed():
    rows = [_row("norm", "memory", opc.Cost(0, 4e8), 0.2, passes="bwd")]
    place_rows(rows, {"fp32": 100e9}, [], 8e9)
    assert efficiencies(rows, {"peak_flops_per_s": {"fp32": 100e9}, "memory_bandwidth_bytes_per_s": 8e9})[
        "memory"] == pytest.approx(0.25)
