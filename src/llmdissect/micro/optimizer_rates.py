"""How fast torch's AdamW runs its passes inside the cache on this CPU (the child side of
`peak`).

On a CPU torch runs AdamW's single-tensor loop: eight element-wise operators per parameter
tensor, 80 bytes per fp32 element in all (perfmodel.op_costs.ADAMW_UNFUSED_PASSES). When a
tensor's working set fits in the last-level cache, 28 of those bytes come from memory (each
element read once and written once) and the rest from the cache, at a rate that no
bandwidth gives: on one 2-core VM 60-110 GB/s (as the passes count bytes) against a copy
bandwidth of 26-37 GB/s and an element-wise rate inside a model of 11 GB/s.

`optimizer_cached_bytes_per_s` times the step over one tensor whose working set
(ADAMW_WORKING_TENSORS x 4 bytes x elements) is a quarter of the cache, kept there from step
to step, and divides the passes' bytes (80 x elements) by that time less the per-tensor cost
measured beside it (`optimizer_tensor_s`). Gradients are kept between steps, as in the
per-tensor probe, so that every timed step applies them. Tensors that spill the cache need
no probe: their passes go to memory at the copy bandwidth `peak` measures (perfmodel.
trainmodel.optimizer_step_s).
"""
from __future__ import annotations

from typing import Any

CACHED_FRACTION = 0.25
"""The probe's working set as a fraction of the last-level cache."""
MIN_ELEMENTS, MAX_ELEMENTS = 2**14, 2**20
"""Bounds on the probe tensor (64 KiB to 4 MiB of fp32): a VM may report its host's whole
cache, hundreds of MiB, of which it gets a share."""
UNKNOWN_CACHE_BYTES = 8 * 2**20
"""The cache assumed where sysfs does not say."""


def probe_elements(cache_bytes: float | None) -> int:
    """The probe's size in elements for a last-level cache of `cache_bytes`."""
    from llmdissect.perfmodel.op_costs import ADAMW_WORKING_TENSORS

    cache = cache_bytes if cache_bytes and cache_bytes > 0 else UNKNOWN_CACHE_BYTES
    return int(min(MAX_ELEMENTS, max(MIN_ELEMENTS, CACHED_FRACTION * cache / (ADAMW_WORKING_TENSORS * 4))))


def measure_optimizer_cached_rate(cache_bytes: float | None, tensor_s: float, min_time_s: float = 0.2,
                                  seed: int = 0) -> dict[str, Any]:
    """`optimizer_cached_bytes_per_s` (as the unfused passes count bytes) and the probe's size."""
    import torch

    from llmdissect.micro.overhead import timed_s
    from llmdissect.perfmodel.op_costs import ADAMW_UNFUSED_PASSES

    n = probe_elements(cache_bytes)
    gen = torch.Generator().manual_seed(seed)
    param = torch.nn.Parameter(torch.rand(n, generator=gen))
    param.grad = torch.rand(n, generator=gen)
    optimizer = torch.optim.AdamW([param], lr=1e-6)
    t = timed_s(optimizer.step, "cpu", min_time_s)
    return {"optimizer_cached_bytes_per_s": ADAMW_UNFUSED_PASSES * 4 * n / max(t - tensor_s, t / 2),
            "optimizer_probe_elements": n}
