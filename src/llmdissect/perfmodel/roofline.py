"""Time of an operator: the roofline (Williams, Waterman, Patterson, CACM 2009).

An operator moving `bytes` and doing `flops` takes the longer of its compute time and its
memory time, each against the ceiling times the efficiency of its operator class:

    t = max(flops / (peak_flops_per_s x eff_compute), bytes / (bandwidth x eff_memory))

Works on scalars and numpy arrays alike.
"""
from __future__ import annotations

from dataclasses import dataclass


def vmax(a, b):
    """max(a, b) for scalars or arrays, without numpy (the estimate path imports none)."""
    return a + (b - a) * (b > a)


@dataclass(frozen=True)
class Ceilings:
    """What one device allows, with the efficiency of each operator class applied."""

    peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    efficiency: dict

    def gemm_flops_per_s(self) -> float:
        return self.peak_flops_per_s * self.efficiency["gemm"]

    def attention_flops_per_s(self) -> float:
        return self.peak_flops_per_s * self.efficiency["attention"]

    def bytes_per_s(self) -> float:
        return self.memory_bandwidth_bytes_per_s * self.efficiency["memory"]


def op_time_s(flops, nbytes, flops_per_s, bytes_per_s):
    """The roofline time of one operator given effective compute and memory rates."""
    return vmax(flops / flops_per_s, nbytes / bytes_per_s)


def gemm_time_s(c: Ceilings, flops, nbytes):
    """A matrix multiply: compute-bound at large sizes, weight-read-bound at batch 1 decode."""
    return op_time_s(flops, nbytes, c.gemm_flops_per_s(), c.bytes_per_s())


def attention_time_s(c: Ceilings, flops, nbytes):
    """A fused attention kernel (sdpa / flash), or eager attention's two matmuls."""
    return op_time_s(flops, nbytes, c.attention_flops_per_s(), c.bytes_per_s())


def memory_time_s(c: Ceilings, nbytes):
    """An element-wise operator (norm, RoPE, SwiGLU, residual add, softmax): bytes / bandwidth."""
    return nbytes / c.bytes_per_s()
