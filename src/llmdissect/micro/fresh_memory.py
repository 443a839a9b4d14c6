"""What memory fresh from the operating system costs on first touch (the child side of `peak`).

A CPU training step allocates its activations and gradients through glibc's malloc and frees
them at its end. glibc serves a request above M_MMAP_THRESHOLD (128 KiB, raised dynamically
up to 32 MiB on 64-bit) with a new mapping that `free` unmaps, and returns the top of its
heap to the system once more than M_TRIM_THRESHOLD of it is free (mallopt(3)); so the next
step's tensors land on pages the kernel maps and zeroes again on their first write: one
minor page fault per 4 KiB page. On a 2-core VM, tiny-llama's b2 x 128 step faulted 84 MB a
step (getrusage) and ran 9 % faster with both thresholds raised out of reach.

`fresh_memory_bytes_per_s` is the rate of that extra work: a 64 MiB buffer (above any
threshold: always a new mapping) filled once fresh and once again warm, on the process's
threads,

    rate = bytes / (t_fresh_fill - t_warm_fill)

each time the median of a few fills. GPUs' caching allocators keep freed blocks (PyTorch's
CUDA memory management notes), so this is measured for the CPU only.
"""
from __future__ import annotations

from typing import Any

BUFFER_BYTES = 64 * 2**20
REPEATS = 7


def measure_fresh_memory(repeats: int = REPEATS) -> dict[str, Any]:
    """The first-touch rate (bytes/s) of fresh memory, with the two fill times it comes from."""
    import statistics
    import time

    import torch

    elements = BUFFER_BYTES // 4

    def median_s(fill) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fill()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    warm = torch.empty(elements)
    warm.fill_(0.0)
    t_warm = median_s(lambda: warm.fill_(1.0))
    t_fresh = median_s(lambda: torch.empty(elements).fill_(1.0))
    extra = t_fresh - t_warm
    return {"fresh_memory_bytes_per_s": BUFFER_BYTES / extra if extra > 0 else None,
            "fresh_fill_s": t_fresh, "warm_fill_s": t_warm}
