"""One timer and one loop policy, used by every measured workload.

On CUDA the timer records events and synchronizes only when a result is read, so a timed
loop never stalls the device between iterations; elsewhere it reads `perf_counter`, after
the caller's synchronization function when one is given.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmdissect.measure.stats import Stats


class Timer:
    """Marks points in time on a device and measures the seconds between two marks."""

    def __init__(self, device: str = "cpu", sync: Callable[[], None] | None = None):
        self.device = str(device)
        self.cuda = self.device.startswith("cuda")
        self._sync = sync
        if self.cuda:
            import torch

            self._torch = torch

    def now(self) -> Any:
        """A mark: a recorded CUDA event, or a host clock reading."""
        if self.cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds from mark `start` to mark `end` (waits for the device on CUDA)."""
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return end - start

    def synchronize(self) -> None:
        if self.cuda:
            self._torch.cuda.synchronize()
        elif self._sync is not None:
            self._sync()


@dataclass(frozen=True)
class LoopPolicy:
    """Warm up, then run at least `min_iters` and at least `min_time_s` (at most `max_iters`)."""

    warmup: int = 2
    """Iterations run before timing; the first is also reported as first-call time."""
    min_iters: int = 5
    min_time_s: float = 0.0
    max_iters: int = 10_000

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_iters < 1 or self.max_iters < self.min_iters or self.min_time_s < 0:
            raise ValueError(f"invalid loop policy {self}")


@dataclass
class LoopResult:
    """Timed samples (warm-up excluded) and the warm-up samples, reported apart."""

    samples: list[float]
    warmup_samples: list[float] = field(default_factory=list)

    @property
    def stats(self) -> Stats:
        return Stats.of(self.samples)

    @property
    def first_call_s(self) -> float | None:
        return self.warmup_samples[0] if self.warmup_samples else None


def measure_loop(fn: Callable[[], Any], policy: LoopPolicy = LoopPolicy(), timer: Timer | None = None,
                 on_iteration: Callable[[int], None] | None = None,
                 on_timed_start: Callable[[], None] | None = None) -> LoopResult:
    """Time `fn()` under `policy`. Marks are recorded between iterations; the device is
    synchronized only at the edges (and per warm-up iteration, which is not measured).
    `on_timed_start()` runs after the warm-up, just before the timed region (an energy meter)."""
    timer = timer or Timer()
    warm: list[float] = []
    for _ in range(policy.warmup):
        a = timer.now()
        fn()
        b = timer.now()
        warm.append(timer.elapsed_s(a, b))
    if on_timed_start is not None:
        on_timed_start()
    marks = [timer.now()]
    host_start = time.perf_counter()
    i = 0
    while i < policy.max_iters and (i < policy.min_iters or time.perf_counter() - host_start < policy.min_time_s):
        fn()
        marks.append(timer.now())
        i += 1
        if on_iteration is not None:
            on_iteration(i)
    timer.synchronize()
    samples = [timer.elapsed_s(marks[k], marks[k + 1]) for k in range(len(marks) - 1)]
    return LoopResult(samples=samples, warmup_samples=warm)
