"""The GEMM-by-shape probe `peak` runs (micro.gemm_grid), on this machine's CPU: a full grid
of efficiencies in (0, 1], and a skinny product reaching less of the peak than a square one."""
from llmdissect.micro import peak as pk
from llmdissect.micro.gemm_grid import DIMS, ROWS_QUICK, measure_gemm_grid


def test_the_probe_measures_a_full_grid_and_skinny_products_are_slower():
    peak = pk.matmul_rows("cpu", {"fp32": (512,)}, min_time_s=0.05)[0]["flops_per_s"]
    out = measure_gemm_grid("cpu", quick=True, peak_flops_per_s=peak, min_time_s=0.005)
    eff = out["efficiency"]
    assert out["dtype"] == "fp32" and out["rows"] == list(ROWS_QUICK) and out["k"] == list(DIMS["cpu"])
    assert len(eff) == len(ROWS_QUICK) and all(len(p) == 3 and all(len(r) == 3 for r in p)
                                               for p in eff)
    assert all(0 < v <= 1 for p in eff for r in p for v in r)
    # one row per weight cannot use the machine's FMA units as 1024 rows do
    assert eff[0][-1][-1] < eff[-1][-1][-1]
    assert out["stream_bytes"] >= 64 * 2**20 and out["dispatch_s"] > 0
    # the peak it is against: the one given, or its own best cell where that ran faster
    assert out["peak_flops_per_s"] == max(peak, out["best_flops_per_s"]) and out["best_flops_per_s"] > 0
