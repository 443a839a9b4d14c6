"""Machine ceilings: measured dense matrix-product FLOP/s per dtype and memory bandwidth.

- FLOP/s: square products C = A B of n x n random matrices (fixed seed), 2 n^3 FLOPs each
  (a multiply-add is 2 FLOPs); several sizes, the best sustained median rate is the peak.
- Bandwidth: `dst.copy_(src)` of a buffer far larger than the caches; bytes moved = bytes
  read + bytes written = 2 x buffer size (STREAM's "Copy" convention).
- On CPU, the theoretical peak from what /proc/cpuinfo tells (see `theoretical_cpu_peak`).

Timed with the measure core's one timer and loop policy (warm-up excluded).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import llmdissect.metric_names as mn

# Sizes per (device kind, dtype), full and quick. Half-precision products on CPUs without
# native support are very slow, so those stay small; every size is reported as a row.
CPU_SIZES = {"fp32": (256, 512, 1024, 2048), "bf16": (128, 256, 512)}
CPU_SIZES_QUICK = {"fp32": (256, 512, 1024), "bf16": (128, 256)}
GPU_SIZES = {"fp32": (2048, 4096), "tf32": (4096, 8192), "bf16": (4096, 8192), "fp16": (4096, 8192)}
GPU_SIZES_QUICK = {"fp32": (2048,), "tf32": (4096,), "bf16": (4096,), "fp16": (4096,)}
COPY_BYTES = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}
COPY_BYTES_QUICK = {"cpu": 64 * 2**20, "cuda": 512 * 2**20}


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


def _clock_hz(info: dict[str, str]) -> tuple[float | None, str]:
    for f in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
              "/sys/devices/system/cpu/cpu0/cpufreq/base_frequency"):
        try:
            return float(Path(f).read_text().split()[0]) * 1e3, f  # kHz
        except (OSError, ValueError, IndexError):
            continue
    if "cpu MHz" in info:
        return float(info["cpu MHz"]) * 1e6, "/proc/cpuinfo 'cpu MHz' (current clock, not turbo)"
    m = re.search(r"@\s*([\d.]+)\s*GHz", info.get("model name", ""))
    if m:
        return float(m.group(1)) * 1e9, "model name"
    return None, "unknown"


def theoretical_cpu_peak(cores: int | None = None, info: dict[str, str] | None = None) -> dict[str, Any]:
    """cores x fp32 lanes x 2 FLOPs per FMA x FMA units x clock, with the assumptions stated.

    Vector width from the flags: avx512f 512 bits, avx2/avx 256, else sse 128. FMA units per
    core: 2 where the `fma` flag is present (Intel since Haswell, AMD since Zen), else 1 unit
    of separate multiply and add (no fused 2 FLOPs per lane: counted as 1). Cores are the
    logical CPUs this process may use (on a VM they may be hyper-threads sharing FMA units,
    which only lowers what is reachable). Some cores run 512-bit instructions on 256-bit
    units at half rate (AMD Zen 4), so this is an upper bound.
    """
    from llmdissect.specs.hardware import usable_cores

    info = _cpuinfo() if info is None else info
    cores = cores or usable_cores()
    flags = set(info.get("flags", "").split())
    bits = 512 if "avx512f" in flags else 256 if ("avx2" in flags or "avx" in flags) else 128
    has_fma = "fma" in flags
    units = 2 if has_fma else 1
    per_fma = 2 if has_fma else 1
    clock, clock_source = _clock_hz(info)
    assumptions = [f"{cores} usable logical cores", f"{bits}-bit vectors ({bits // 32} fp32 lanes) from flags",
                   f"{units} FMA unit(s) per core, {per_fma} FLOPs per lane per instruction",
                   f"clock {clock / 1e9:.3g} GHz from {clock_source}" if clock else "clock unknown",
                   "an upper bound: shared FMA units on hyper-threads and half-rate 512-bit execution lower it"]
    out: dict[str, Any] = {"assumptions": assumptions, "vector_bits": bits, "fma_units": units, "cores": cores,
                           "clock_hz": clock, "flops_per_s": {}}
    if clock:
        fp32 = cores * (bits // 32) * per_fma * units * clock
        out["flops_per_s"]["fp32"] = fp32
        if "avx512_bf16" in flags or "amx_bf16" in flags:
            # VDPBF16PS: two bf16 products per fp32 lane per instruction (AMX not counted)
            out["flops_per_s"]["bf16"] = 2 * fp32
            assumptions.append("bf16: avx512_bf16 dot products, 2x the fp32 rate (AMX tiles not counted)")
    return out


def _sync(device: str):
    if device.startswith("cuda"):
        import torch

        return lambda: torch.cuda.synchronize(device)
    return None


def matmul_rows(device: str, sizes: dict[str, tuple[int, ...]], min_time_s: float, seed: int = 0,
                progress: Any = None) -> list[dict[str, Any]]:
    """One row per (dtype, n): time Stats and FLOP/s of an n x n x n product."""
    import torch

    from llmdissect.measure import LoopPolicy, Timer, measure_loop

    rows = []
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for dtype, ns in sizes.items():
        tdtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
                  "fp16": torch.float16}[dtype]
        if device.startswith("cuda"):
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        for n in ns:
            a = torch.randn(n, n, generator=gen).to(device=device, dtype=tdtype)  # [n, n]
            b = torch.randn(n, n, generator=gen).to(device=device, dtype=tdtype)  # [n, n]
            out = torch.empty(n, n, device=device, dtype=tdtype)
            policy = LoopPolicy(warmup=2, min_iters=3, min_time_s=min_time_s)
            res = measure_loop(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), policy, Timer(device, _sync(device)))
            st = res.stats
            flops = 2 * n ** 3  # n^2 outputs, n multiply-adds each
            rows.append({"what": "matmul", "dtype": dtype, "n": n, mn.FLOPS: flops, mn.TIME_S: st.to_dict(),
                         mn.FLOPS_PER_S: flops / st.median})
            if progress:
                progress()
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def copy_row(device: str, nbytes: int, min_time_s: float, seed: int = 0) -> dict[str, Any]:
    """`dst.copy_(src)` of `nbytes`: bandwidth = 2 x nbytes / median time (read + write)."""
    import torch

    from llmdissect.measure import LoopPolicy, Timer, measure_loop

    gen = torch.Generator(device="cpu").manual_seed(seed)
    src = torch.rand(nbytes // 4, generator=gen).to(device)  # fp32, random, never zeros
    dst = torch.empty_like(src)
    res = measure_loop(lambda: dst.copy_(src), LoopPolicy(warmup=2, min_iters=5, min_time_s=min_time_s),
                       Timer(device, _sync(device)))
    st = res.stats
    moved = 2 * src.numel() * 4
    return {"what": "copy", mn.SIZE_BYTES: src.numel() * 4, mn.BYTES: moved, mn.TIME_S: st.to_dict(),
            mn.BYTES_PER_S: moved / st.median}
