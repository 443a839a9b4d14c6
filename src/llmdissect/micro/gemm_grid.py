"""GEMM efficiency by shape, measured on this device (the child side of `peak`).

A model's linear layers are not square products: decode multiplies 1-8 rows by each weight,
prefill and training a few hundred to thousands. How much of the peak a product of M rows,
K inputs and N outputs reaches depends on all three: skinny products (M of 2-16) run far
below the peak on CPUs, whose GEMM kernels pack the weight before using it, and M = 1 is
a weight-streaming matrix-vector product. One curve by FLOPs cannot say that, so `peak`
times `F.linear(x[M, K], W[N, K])` over a grid of (M, K, N) and stores, per point,

    efficiency = 2 M K N / ((t - t_dispatch) x peak_flops_per_s)

- The weights are cycled through copies whose total is at least twice the last-level cache
  (or STREAM_BYTES), so that every call reads its weight from memory, as a model larger
  than the cache does in each forward. (A model that fits in the cache runs faster than
  this predicts at small M.)
- `t_dispatch` is the time of a 1 x 16 x 16 product, what one call costs whatever its size;
  on a CPU the estimator adds the measured per-operator fixed cost on top (`op_fixed_s`), so
  it is taken out here rather than counted twice. On a GPU a loop of calls runs at the
  slower of the host's launches and the kernels, not their sum (the estimator takes the
  longer of the two, layertime.launch_bound): nothing is taken out, and the rows reach
  16384, where a 2048-wide product is no longer launch-bound. (Taking the launch out of a
  kernel-bound call's time read 1.0 at mid sizes on an H200.)
- Efficiencies are capped at 1 (a product that is pure dispatch would divide by ~0).
- `best_flops_per_s` is the fastest cell's rate from its whole time (dispatch left in): a
  sustained median rate like `peak`'s own matmul rows, which `peak` takes as its peak where
  it is higher (`raise_peak`): on a shared machine the matmul rows can fall in a slow
  stretch (92-100 GFLOP/s there against 190-204 a minute later, here) while the grid ran
  at full speed and read 1.0 at every size from 64 rows up.

The estimator interpolates log-linearly in M, K and N between the grid's points and holds
the edge values beyond them (`perfmodel.roofline.gemm_grid_efficiency`).
"""
from __future__ import annotations

import itertools
from typing import Any

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
ROWS_QUICK = (1, 2, 4, 8, 16, 64, 256, 1024)
"""2 and 8 too: a few sequences decoding together (a server at a few requests a second) run
products of 2-8 rows, where the efficiency rises about linearly in M (one thread here: 3.5,
5.8, 11, 20 % of its share of the peak at M = 1, 2, 4, 8); between 1 and 4 alone, log-linear
interpolation read 7.2 % at M = 2, a product 20 % faster than it runs."""
ROWS_GPU = (1, 4, 16, 64, 256, 1024, 4096, 16384)
DIMS = {"cpu": (128, 512, 2048), "cuda": (512, 2048, 8192)}
"""K and N of the grid: on a CPU a 16 M-parameter demo model's 128-1024, a 7B model's 4096
held at the 2048 edge (large products are near their plateau by then); on a GPU up to a
70B model's 8192 (its MLP's 28672 held there)."""
STREAM_BYTES = {"cpu": 64 * 2**20, "cuda": 256 * 2**20}
DTYPE = {"cpu": "fp32", "cuda": "bf16"}


def _weights(n_out: int, k: int, dtype, device: str, total_bytes: int, gen) -> list:
    import torch

    one = n_out * k * torch.finfo(dtype).bits // 8
    copies = max(1, -(-total_bytes // one))
    base = torch.randn(n_out, k, generator=gen).to(device=device, dtype=dtype)  # [N, K]
    return [base.clone() for _ in range(copies)]


def measure_gemm_grid(device: str, quick: bool, peak_flops_per_s: float, cache_bytes: int = 0,
                      min_time_s: float = 0.02, seed: int = 0, raise_to_best: bool = True) -> dict[str, Any]:
    """The (M, K, N) grid of efficiencies, with the dtype, the dispatch time and the stream size.
    `raise_to_best` False keeps `peak_flops_per_s` as the reference whatever the grid reached
    (the one-thread grid, against one thread's share of the peak)."""
    import torch
    import torch.nn.functional as F

    from llmdissect.dtypes import torch_dtype
    from llmdissect.measure import LoopPolicy, Timer, measure_loop

    kind = "cuda" if device.startswith("cuda") else "cpu"
    dtype = torch_dtype(DTYPE[kind])
    sync = (lambda: torch.cuda.synchronize(device)) if kind == "cuda" else None
    timer = Timer(device, sync)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    policy = LoopPolicy(warmup=2, min_iters=3, min_time_s=min_time_s)

    def timed(x, weights) -> float:
        cycle = itertools.cycle(weights)
        return measure_loop(lambda: F.linear(x, next(cycle)), policy, timer).stats.median

    with torch.no_grad():
        tiny = torch.randn(1, 16, generator=gen).to(device=device, dtype=dtype)
        dispatch = timed(tiny, [torch.randn(16, 16, generator=gen).to(device=device, dtype=dtype)])
        stream = max(STREAM_BYTES[kind], 2 * int(cache_bytes or 0))
        rows, dims = (ROWS_GPU if kind == "cuda" else ROWS_QUICK if quick else ROWS), DIMS[kind]
        eff = [[[0.0] * len(dims) for _ in dims] for _ in rows]
        best = 0.0
        for j, k in enumerate(dims):
            for n_i, n in enumerate(dims):
                weights = _weights(n, k, dtype, device, stream, gen)
                for i, m in enumerate(rows):
                    x = torch.randn(m, k, generator=gen).to(device=device, dtype=dtype)  # [M, K]
                    t = timed(x, weights)
                    best = max(best, 2 * m * k * n / t)
                    net = max(t - (dispatch if kind == "cpu" else 0.0), 1e-9)
                    eff[i][j][n_i] = 2 * m * k * n / (net * peak_flops_per_s)
                del weights
    grid = {"dtype": DTYPE[kind], "rows": list(rows), "k": list(dims), "n": list(dims), "efficiency": eff,
            "dispatch_s": dispatch, "stream_bytes": stream, "best_flops_per_s": best}
    return raise_peak(grid, peak_flops_per_s, raise_to_best)


def raise_peak(grid: dict[str, Any], peak_flops_per_s: float, to_best: bool = True) -> dict[str, Any]:
    """The grid against the higher of `peak_flops_per_s` and its own best rate (or against
    `peak_flops_per_s` alone where not `to_best`), which it names (`peak_flops_per_s`). Its
    efficiencies were measured against `peak_flops_per_s`; against a higher peak each is that
    much smaller (the measured rates stay what they were), then capped at 1."""
    peak = max(peak_flops_per_s, float(grid.get("best_flops_per_s") or 0.0) if to_best else 0.0)
    scale = peak_flops_per_s / peak
    eff = [[[min(1.0, e * scale) for e in row] for row in plane] for plane in grid["efficiency"]]
    return {**grid, "efficiency": eff, "peak_flops_per_s": peak}
