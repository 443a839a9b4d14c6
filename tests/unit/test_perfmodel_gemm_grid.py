"""GEMM efficiency by (M, K, N) shape, as `peak` measures it (micro.gemm_grid) and the
estimator reads it: log-linear interpolation, edges held, the profile's checks. Closed forms."""
from __future__ import annotations

import math

import pytest

from llmdissect.perfmodel import layertime as lt
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.roofline import Ceilings, gemm_grid_efficiency, gemm_time_s
from llmdissect.specs import get_model, resolve_platform

ROWS, DIMS = (1, 4, 16, 64), (128, 512, 2048)


def _grid(f):
    """A grid whose every point is f(M, K, N)."""
    return {"dtype": "fp32", "rows": list(ROWS), "k": list(DIMS), "n": list(DIMS),
            "efficiency": [[[f(m, k, n) for n in DIMS] for k in DIMS] for m in ROWS]}


def _axes(table):
    return (tuple(table["rows"]), tuple(table["k"]), tuple(table["n"]),
            tuple(tuple(tuple(r) for r in p) for p in table["efficiency"]))


def test_interpolation_is_exact_for_an_efficiency_linear_in_the_logs():
    def f(m, k, n):
        return 0.05 + 0.1 * math.log(m, 4) + 0.02 * math.log(k, 4) + 0.01 * math.log(n, 4)
    grid = _axes(_grid(f))
    for shape in [(2, 256, 1024), (8, 128, 300), (33, 1000, 2048), (4, 512, 512)]:
        assert gemm_grid_efficiency(grid, *shape) == pytest.approx(f(*shape))


def test_beyond_the_grid_the_edge_values_hold():
    grid = _axes(_grid(lambda m, k, n: 0.1 * ROWS.index(m) + 0.01 * DIMS.index(k) + 0.001 * DIMS.index(n) + 0.05))
    assert gemm_grid_efficiency(grid, 4096, 8192, 16384) == pytest.approx(0.3 + 0.02 + 0.002 + 0.05)
    assert gemm_grid_efficiency(grid, 1, 16, 64) == pytest.approx(0.05)


def test_a_product_with_its_shape_takes_the_grid_time_and_never_beats_the_bandwidth():
    grid = _axes(_grid(lambda m, k, n: 0.5 if m >= 16 else 0.05))
    c = Ceilings(100e9, 10e9, {"gemm": 0.9, "attention": 0.5, "memory": 0.5}, gemm_grid=grid)
    flops, nbytes = 2 * 64 * 512 * 512, 4 * 512 * 512
    assert gemm_time_s(c, flops, nbytes, (64, 512, 512)) == pytest.approx(flops / (100e9 * 0.5))
    # at M = 1 the grid's 5 % is slower than reading the weights at the bandwidth: the grid wins
    assert gemm_time_s(c, 2 * 512 * 512, nbytes, (1, 512, 512)) == pytest.approx(2 * 512 * 512 / 5e9)
    # a grid of 100 % at M = 1 would beat the bandwidth: the bandwidth (not x memory efficiency) bounds it
    fast = Ceilings(100e9, 10e9, {"gemm": 0.9, "attention": 0.5, "memory": 0.5}, gemm_grid=_axes(_grid(lambda *a: 1.0)))
    assert gemm_time_s(fast, 2 * 512 * 512, nbytes, (1, 512, 512)) == pytest.approx(nbytes / 10e9)
    # without a shape, the class efficiency and the memory efficiency, as before
    assert gemm_time_s(c, flops, nbytes) == pytest.approx(max(flops / 90e9, nbytes / 5e9))


def test_the_layer_costs_each_linear_at_its_own_rows():
    m = get_model("tiny-llama")
    grid = _axes(_grid(lambda rows, k, n: 0.4 if rows >= 16 else 0.04))
    c = Ceilings(1e11, 1e30, {"gemm": 0.4, "attention": 1, "memory": 1}, gemm_grid=grid)
    shapes = lt.layer_gemm_shapes(m)
    # 4 rows run at a tenth of the 64-row efficiency: ten times as long per FLOP
    per_flop_4 = lt.layer_gemm_time_s(c, m, 4, 4, 0) / (4 * sum(k * n for k, n in shapes))
    per_flop_64 = lt.layer_gemm_time_s(c, m, 64, 4, 0) / (64 * sum(k * n for k, n in shapes))
    assert per_flop_4 == pytest.approx(10 * per_flop_64)


def test_the_profile_grid_applies_only_in_its_dtype_and_when_well_formed():
    plat = resolve_platform("cpu")
    section = {"peak_flops_per_s": {"fp32": 1e11, "bf16": 1e10}, "memory_bandwidth_bytes_per_s": 1e10,
               "gemm_efficiency_by_shape": _grid(lambda *a: 0.25)}
    mach = machine_for(plat, "fp32", {"cpu": section})
    assert mach.ceilings.gemm_grid and "GEMM efficiency by (M, K, N)" in mach.sources["gemm"]
    assert machine_for(plat, "bf16", {"cpu": section}).ceilings.gemm_grid == ()
    for bad in ({**section["gemm_efficiency_by_shape"], "rows": [4, 1, 16, 64]},   # not ascending
                {**section["gemm_efficiency_by_shape"], "efficiency": [[[0.5]]]},   # wrong shape
                _grid(lambda *a: 1.5), "a string"):
        assert machine_for(plat, "fp32", {"cpu": {**section, "gemm_efficiency_by_shape": bad}}).ceilings.gemm_grid == ()


def test_a_grid_that_ran_faster_than_the_peak_raises_it_and_keeps_its_rates():
    from llmdissect.micro.gemm_grid import raise_peak

    # measured against 100 GFLOP/s, its best cell at 160: the peak becomes 160 and every
    # cell's rate (efficiency x peak) stays what was measured, capped at the new peak
    grid = {**_grid(lambda m, k, n: {1: 0.05, 4: 0.4, 16: 1.2, 64: 1.7}[m]), "best_flops_per_s": 160e9}
    out = raise_peak(grid, 100e9)
    assert out["peak_flops_per_s"] == 160e9
    assert out["efficiency"][0][0][0] * 160e9 == pytest.approx(0.05 * 100e9)
    assert out["efficiency"][2][1][1] * 160e9 == pytest.approx(1.2 * 100e9)
    assert out["efficiency"][3][2][2] == 1.0  # 170 GFLOP/s from the net time: capped
    # a grid slower than the peak leaves it, and its efficiencies, as they were (capped at 1)
    slow = raise_peak({**_grid(lambda m, k, n: 0.5), "best_flops_per_s": 60e9}, 100e9)
    assert slow["peak_flops_per_s"] == 100e9 and slow["efficiency"][3][2][2] == 0.5


def test_peak_takes_the_grids_rate_where_its_matmul_rows_ran_slower():
    from llmdissect.micro.peak_child import take_grid_peak

    summary = {"peak_flops_per_s": {"fp32": 100e9, "bf16": 260e9}}
    take_grid_peak(summary, {"dtype": "fp32", "peak_flops_per_s": 160e9})
    assert summary["peak_flops_per_s"] == {"fp32": 160e9, "bf16": 260e9}
    assert summary["peak_raised"] == {"dtype": "fp32", "matmul_rows": 100e9, "gemm_grid": 160e9}
    same = {"peak_flops_per_s": {"fp32": 200e9}}
    take_grid_peak(same, {"dtype": "fp32", "peak_flops_per_s": 200e9})
    take_grid_peak(same, None)
    assert same == {"peak_flops_per_s": {"fp32": 200e9}}
