"""`peak`, the child side: dense matmul FLOP/s per dtype and copy bandwidth on every device
asked for (the measurements themselves are `micro.peak`'s), the fixed costs (`micro.overhead`)
and the GEMM efficiency by shape (`micro.gemm_grid`)."""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.micro import peak as pk


def _plan(device: str, quick: bool) -> tuple[dict[str, tuple[int, ...]], int]:
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if kind == "cuda":
        sizes = pk.GPU_SIZES_QUICK if quick else pk.GPU_SIZES
    else:
        sizes = pk.CPU_SIZES_QUICK if quick else pk.CPU_SIZES
    return sizes, (pk.COPY_BYTES_QUICK if quick else pk.COPY_BYTES)[kind]


def summarize_device(rows: list[dict[str, Any]], copy: dict[str, Any]) -> dict[str, Any]:
    """Best sustained (median-time) FLOP/s per dtype over the sizes, and the copy bandwidth."""
    best: dict[str, float] = {}
    for r in rows:
        best[r["dtype"]] = max(best.get(r["dtype"], 0.0), r[mn.FLOPS_PER_S])
    return {"peak_flops_per_s": best, "memory_bandwidth_bytes_per_s": copy[mn.BYTES_PER_S], "rows": rows + [copy]}


def take_grid_peak(summary: dict[str, Any], grid: dict[str, Any] | None) -> None:
    """Where the GEMM grid ran faster than the matmul rows (they fell in a slow stretch of a
    shared machine; gemm_grid.raise_peak), its rate is the dtype's peak, and `peak_raised`
    says from what."""
    if grid and grid.get("peak_flops_per_s", 0.0) > summary["peak_flops_per_s"].get(grid["dtype"], 0.0):
        dtype = grid["dtype"]
        summary["peak_raised"] = {"dtype": dtype, "matmul_rows": summary["peak_flops_per_s"].get(dtype),
                                  "gemm_grid": grid["peak_flops_per_s"]}
        summary["peak_flops_per_s"][dtype] = grid["peak_flops_per_s"]


def _gemm_grid(device: str, config: dict[str, Any], peaks: dict[str, float]) -> dict[str, Any] | None:
    """micro.gemm_grid in the device's default dtype, against the peak just measured in it."""
    from llmdissect.micro.gemm_grid import DTYPE, measure_gemm_grid
    from llmdissect.specs.hardware import last_level_cache_bytes

    kind = "cuda" if device.startswith("cuda") else "cpu"
    peak = peaks.get(DTYPE[kind])
    if not peak:
        return None
    cache = last_level_cache_bytes() if kind == "cpu" else 0
    return measure_gemm_grid(device, config["quick"], peak, cache or 0, min(config["min_time_s"], 0.05),
                             config.get("seed", 0))


def _one_thread_grid(config: dict[str, Any], grid: dict[str, Any], peak: float) -> dict[str, Any]:
    """The grid again with one thread, against one thread's share of the peak (what a
    one-thread process such as serve-local's server gets, ceilings.one_thread_machine). Not
    the all-thread grid at that share: torch runs a product of 1-4 rows on one thread
    whatever it is given (a [1, 384] x [384, 1024] one took 216 us on one thread and 237 us
    on two here), 64 rows at 1.6x and 256 rows at 1.85x the two threads' time."""
    import torch

    from llmdissect.micro.gemm_grid import measure_gemm_grid
    from llmdissect.specs.hardware import last_level_cache_bytes

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_gemm_grid("cpu", config["quick"], peak / threads, last_level_cache_bytes() or 0,
                                 min(config["min_time_s"], 0.05), config.get("seed", 0), raise_to_best=False)
    finally:
        torch.set_num_threads(threads)


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Child entry: {"devices": [...], "quick": bool, "min_time_s": float}."""
    import torch

    from llmdissect.measure.env import capture_device_env
    from llmdissect.micro.overhead import measure_overheads
    from llmdissect.progress import report

    torch.manual_seed(config.get("seed", 0))
    plans = {d: _plan(d, config["quick"]) for d in config["devices"]}
    total = sum(sum(len(v) for v in s.values()) + 3 for s, _ in plans.values())
    done = [0]
    out: dict[str, Any] = {}
    for device, (sizes, nbytes) in plans.items():
        def tick(device=device) -> None:
            done[0] += 1
            report(config, done[0], total, f"{device} matmuls")
        report(config, done[0], total, f"{device} matmuls")
        rows = pk.matmul_rows(device, sizes, config["min_time_s"], config.get("seed", 0), progress=tick)
        report(config, done[0], total, f"{device} copy")
        copy = pk.copy_row(device, nbytes, config["min_time_s"], config.get("seed", 0))
        one_thread = None
        if device == "cpu" and torch.get_num_threads() > 1:  # what a process of one thread streams
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                one_thread = pk.copy_row(device, nbytes, config["min_time_s"], config.get("seed", 0))[mn.BYTES_PER_S]
            finally:
                torch.set_num_threads(threads)
        done[0] += 1
        report(config, done[0], total, f"{device} fixed costs")
        overheads = measure_overheads(device, min(config["min_time_s"], 0.3), config.get("seed", 0))
        if device == "cpu":  # torch's AdamW on a CPU: its passes' rate in the cache
            from llmdissect.micro.optimizer_rates import measure_optimizer_cached_rate
            from llmdissect.specs.hardware import last_level_cache_bytes

            overheads.update(measure_optimizer_cached_rate(
                last_level_cache_bytes(), overheads["optimizer_tensor_s"], min(config["min_time_s"], 0.3),
                config.get("seed", 0)))
        done[0] += 1
        report(config, done[0], total, f"{device} GEMM shapes")
        summary = summarize_device(rows, copy)
        grid = _gemm_grid(device, config, summary["peak_flops_per_s"])
        take_grid_peak(summary, grid)
        grid_one_thread = None
        if device == "cpu" and grid and torch.get_num_threads() > 1:
            grid_one_thread = _one_thread_grid(config, grid, summary["peak_flops_per_s"][grid["dtype"]])
        done[0] += 1
        name = "cpu" if device == "cpu" else torch.cuda.get_device_name(int(device.split(":")[1]))
        if device == "cpu" and config.get("serve_engine", not config["quick"]):  # what serve-local runs
            from llmdissect.micro.serve_engine import measure_serve_engine

            report(config, done[0], total, f"{device} serving engine")
            overheads.update(measure_serve_engine(device, config.get("seed", 0)))
        entry = {"device": device, "name": name, **summary, "overheads": overheads, "gemm_grid": grid,
                 "gemm_grid_one_thread": grid_one_thread,
                 "memory_bandwidth_one_thread_bytes_per_s": one_thread}
        if device == "cpu":
            theory = pk.theoretical_cpu_peak(torch.get_num_threads())
            entry["theoretical_peak_flops_per_s"] = theory.pop("flops_per_s")
            entry["theoretical"] = theory
            entry["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out[device] = entry
    return {"metrics": {"devices": out, "threads": torch.get_num_threads()}, "env": capture_device_env()}
