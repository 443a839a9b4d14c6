"""The fused attention's forward efficiency by sequence length and the layer's element-wise
efficiency by token count: measured rows -> `bench ops` curves -> the profile -> the estimate
(closed forms; no child processes, no timing)."""
import math

import pytest

from llmdissect.measure.stats import Stats
from llmdissect.micro.ops_cases import OpCase
from llmdissect.micro.ops_child import efficiencies, elementwise_tokens, place_rows, raw_row
from llmdissect.micro.ops_launch import profile_update
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.roofline import Ceilings, attention_time_s, memory_time_s

PEAK, DRAM = 100e9, 10e9


def _row(op, cls, cost, t, passes="fwd", **size):
    return raw_row(OpCase(op, "s", passes, cls, cost, lambda: None, "fp32", **size), Stats.of([t, t, t]))


def _measured():
    """Attention forward at s = 64 (20 % of the peak) and 256 (40 %), backward at 64 (10 %)
    and 256 (20 %); the layer's element-wise operators at 16 tokens (10 % of DRAM), 64 (30 %)
    and 512 (80 %), and a loss row at the run's 64 tokens (50 %)."""
    rows = [_row("attention flash", "attention", opc.Cost(2e7, 1e3), 1e-3, seq=64),
            _row("attention math", "attention", opc.Cost(2e7, 1e3), 2e-3, seq=64),  # slower backend: not picked
            _row("attention flash", "attention", opc.Cost(4e7, 1e3), 1e-3, seq=256),
            _row("attention flash", "attention", opc.Cost(4e7, 1e3), 4e-3, passes="bwd", seq=64),
            _row("attention flash", "attention", opc.Cost(8e7, 1e3), 4e-3, passes="bwd", seq=256),
            _row("rmsnorm", "memory", opc.Cost(0, 1e5), 1e-4, tokens=16),
            _row("rmsnorm", "memory", opc.Cost(0, 3e5), 1e-4, tokens=64),
            _row("silu x gate", "memory", opc.Cost(0, 3e6), 1e-3, tokens=64),
            _row("rmsnorm", "memory", opc.Cost(0, 8e6), 1e-3, tokens=512),
            _row("cross-entropy", "memory", opc.Cost(0, 5e6), 1e-3)]
    rows[0]["shape"], rows[1]["shape"] = "b1 s64", "b1 s64"
    rows[2]["shape"], rows[3]["shape"], rows[4]["shape"] = "b1 s256", "b1 s64", "b1 s256"
    place_rows(rows, {"fp32": PEAK}, [], DRAM)
    return efficiencies(rows, {"peak_flops_per_s": {"fp32": PEAK}, "memory_bandwidth_bytes_per_s": DRAM}, 64)


def test_bench_ops_curves_by_size_and_the_class_at_the_runs_tokens():
    eff = _measured()
    assert eff["attention_by_seq"] == [[64, pytest.approx(0.2)], [256, pytest.approx(0.4)]]
    assert eff["attention_bwd_by_seq"] == [[64, pytest.approx(0.1)], [256, pytest.approx(0.2)]]
    assert eff["memory_by_tokens"] == [[16, pytest.approx(0.1)], [64, pytest.approx(0.3)], [512, pytest.approx(0.8)]]
    # the class: forward and backward fused rows (fastest backend per shape): 18e7 FLOPs in 10 ms
    assert eff["attention"] == pytest.approx(1.8e8 / 10e-3 / PEAK)
    # the class: the run's 64 tokens only (8.3 MB in 2.1 ms), not the curve's other sizes
    assert eff["memory"] == pytest.approx(8.3e6 / 2.1e-3 / DRAM)


def test_one_size_gives_no_curve():
    rows = [_row("attention flash", "attention", opc.Cost(2e7, 1e3), 1e-3, seq=64),
            _row("rmsnorm", "memory", opc.Cost(0, 1e5), 1e-4, tokens=64)]
    place_rows(rows, {"fp32": PEAK}, [], DRAM)
    eff = efficiencies(rows, {"peak_flops_per_s": {"fp32": PEAK}, "memory_bandwidth_bytes_per_s": DRAM}, 64)
    assert "attention_by_seq" not in eff and "memory_by_tokens" not in eff


def test_element_wise_sizes_a_quarter_and_eight_times_the_runs_capped():
    assert elementwise_tokens(64) == [16, 64, 512]
    assert elementwise_tokens(2048) == [512, 2048, 4096]
    assert elementwise_tokens(8192) == [2048, 8192]
    assert elementwise_tokens(2) == [1, 2, 16]


def _ceilings_from_profile(eff):
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.specs.hardware import resolve_platform

    class Rec:
        id, config = "r1", {"model": "m", "tokens": 64, "dtype": "fp32", "device": "cpu"}
        metrics = {"efficiency": eff, "ceilings": {"device_name": "cpu"}}
    update = profile_update(Rec())
    profile = {**update, "cpu": {**update["cpu"], "peak_flops_per_s": {"fp32": PEAK},
                                 "memory_bandwidth_bytes_per_s": DRAM}}
    return machine_for(resolve_platform("cpu"), "fp32", profile).ceilings


def test_the_estimate_reads_the_curves_log_linear_between_points_held_beyond():
    c = _ceilings_from_profile(_measured())
    assert c.attention_efficiency_by_seq == ((64.0, 0.2), (256.0, 0.4))
    assert c.attention_bwd_efficiency_by_seq == ((64.0, 0.1), (256.0, 0.2))
    # at s = 128, halfway in log between 64 and 256: efficiency 0.3
    assert attention_time_s(c, 3e7, 0, seq=128) == pytest.approx(3e7 / (PEAK * 0.3))
    assert attention_time_s(c, 3e7, 0, seq=1024) == pytest.approx(3e7 / (PEAK * 0.4))  # held above
    assert attention_time_s(c, 3e7, 0) == pytest.approx(3e7 / (PEAK * c.efficiency["attention"]))  # no length
    w = math.log(128 / 64) / math.log(512 / 64)
    assert memory_time_s(c, 1e6, 128) == pytest.approx(1e6 / (DRAM * (0.3 + w * 0.5)))
    assert memory_time_s(c, 1e6, 1) == pytest.approx(1e6 / (DRAM * 0.1))  # held below
    assert memory_time_s(c, 1e6) == pytest.approx(1e6 / (DRAM * c.efficiency["memory"]))


def test_a_profile_without_curves_prices_as_before():
    c = Ceilings(PEAK, DRAM, {"gemm": 0.5, "attention": 0.25, "memory": 0.5})
    assert attention_time_s(c, 1e7, 0, seq=128) == pytest.approx(1e7 / (PEAK * 0.25))
    assert memory_time_s(c, 1e6, 512) == pytest.approx(1e6 / (DRAM * 0.5))


def test_attention_by_length_forward_and_backward():
    from llmdissect.perfmodel.layertime import layer_attention_backward_time_s, layer_attention_time_s
    from llmdissect.specs.model_files import get_model

    m = get_model("tiny-llama")
    curves = dict(attention_efficiency_by_seq=((64.0, 0.2), (256.0, 0.4)),
                  attention_bwd_efficiency_by_seq=((64.0, 0.1), (256.0, 0.25)))
    c = Ceilings(PEAK, 1e30, {"gemm": 0.5, "attention": 0.1, "memory": 0.5}, **curves)
    flops = opc.attention_flops(2, 256, m.num_heads, m.head_dim, causal=1)
    assert layer_attention_time_s(c, m, 2, 256, 4, 0, by_length=True) == pytest.approx(flops / (PEAK * 0.4))
    assert layer_attention_time_s(c, m, 2, 256, 4, 0) == pytest.approx(flops / (PEAK * 0.1))  # the class
    # the backward's four products (twice the FLOPs) at its own rate, frozen weights or not
    for frozen in (0, 1):
        assert layer_attention_backward_time_s(c, m, 2, 256, 4, 0, 1.0, frozen=frozen) == pytest.approx(
            2 * flops / (PEAK * 0.25))
    eager = opc.attention_flops(2, 256, m.num_heads, m.head_dim, causal=0)
    scores = opc.eager_scores_bytes(2, 256, m.num_heads, 4)
    assert layer_attention_time_s(c, m, 2, 256, 4, 1, by_length=True) == pytest.approx(
        eager / (PEAK * 0.1) + scores / (1e30 * 0.5))  # eager's matmuls are not the fused kernel
    # no backward curve: (2 - frozen) x the forward, as the layer's other kernels
    c = Ceilings(PEAK, 1e30, {"gemm": 0.5, "attention": 0.1, "memory": 0.5},
                 attention_efficiency_by_seq=curves["attention_efficiency_by_seq"])
    fwd = layer_attention_time_s(c, m, 2, 256, 4, 0, by_length=True)
    assert fwd == pytest.approx(flops / (PEAK * 0.4))
    assert layer_attention_backward_time_s(c, m, 2, 256, 4, 0, fwd, frozen=1) == pytest.approx(fwd)


def test_a_training_step_without_curves_is_unchanged_by_them_being_possible():
    """Backward = 2 x the forward's kernels where no backward curve was measured (the old
    convention), so a profile without curves prices a step as before."""
    from llmdissect.perfmodel.layertime import layer_attention_backward_time_s, layer_attention_time_s
    from llmdissect.specs.model_files import get_model

    m = get_model("tiny-llama")
    c = Ceilings(PEAK, DRAM, {"gemm": 0.5, "attention": 0.1, "memory": 0.5})
    fwd = layer_attention_time_s(c, m, 2, 128, 4, 0, by_length=True)
    assert layer_attention_backward_time_s(c, m, 2, 128, 4, 0, fwd) == pytest.approx(2 * fwd)
