"""Memory tracking, device and host kept apart (docs/metrics.md, `peak_memory_bytes`).

- CUDA: the caching allocator's peak allocated and reserved bytes.
- CPU: the peak of live tensor bytes seen by a dispatch-mode tracker (every tensor an
  operator returns, until its storage is freed), and the process's peak RSS beside it.
"""
from __future__ import annotations

import resource
import sys
from typing import Any

import llmdissect.metric_names as mn


def peak_rss_bytes() -> int:
    """Peak resident set size of this process since it started."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def cuda_reset_peak(device: Any = None) -> None:
    import torch

    torch.cuda.reset_peak_memory_stats(device)


def cuda_peaks(device: Any = None) -> dict[str, int]:
    import torch

    return {mn.PEAK_MEMORY_BYTES: int(torch.cuda.max_memory_allocated(device)),
            mn.PEAK_RESERVED_BYTES: int(torch.cuda.max_memory_reserved(device))}


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (e.g. a model's parameters); a DTensor
    (FSDP2's parameters and the optimizer state made from them) counts its local shard: its
    own untyped_storage() reports the global tensor's bytes."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):
            t = t.to_local()
        st = t.untyped_storage()
        # keyed by the storage itself: FSDP2 frees (resizes to 0) the data of resharded
        # parameters, whose data pointer must not be read
        seen[st._cdata] = st.nbytes()
    return sum(seen.values())


def live_tensor_tracker():
    """A context manager whose `.peak_bytes` is the peak of bytes allocated inside it and
    still alive (storages created by operators while it is active). Slows execution: use
    it on an untimed step."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class LiveTensorTracker(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, tuple[Any, int]] = {}
            self.current_bytes = 0
            self.peak_bytes = 0

        def _sweep(self) -> None:
            dead = [k for k, (ref, _) in self.live.items() if ref.expired()]
            for k in dead:
                self.current_bytes -= self.live.pop(k)[1]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self._sweep()
            # A view or an in-place result shares an input's storage: nothing was allocated
            # (counting it would add e.g. every linear weight, seen through `aten.t`).
            inputs = {_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    st = t.untyped_storage()
                    key = st._cdata
                    if key not in self.live and key not in inputs:
                        n = st.nbytes()
                        self.live[key] = (StorageWeakRef(st), n)
                        self.current_bytes += n
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
            return out

    def _storage_key(t: Any) -> int | None:
        try:
            return t.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError):  # tensor subclasses without one storage
            return None

    return LiveTensorTracker()
