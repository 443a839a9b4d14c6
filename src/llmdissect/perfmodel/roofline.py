"""Time of an operator: the roofline (Williams, Waterman, Patterson, CACM 2009).

An operator moving `bytes` and doing `flops` takes the longer of its compute time and its
memory time, each against the ceiling times the efficiency of its operator class:

    t = max(flops / (peak_flops_per_s x eff_compute), bytes / (bandwidth x eff_memory))

except a GEMM on a GPU priced from its datasheet, whose compute time and weights' read add
up (gemm_unhidden_time_s). Works on scalars and numpy arrays alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def vmax(a, b):
    """max(a, b) for scalars or arrays, without numpy (the estimate path imports none)."""
    return a + (b - a) * (b > a)


def vmin(a, b):
    """min(a, b) for scalars or arrays, as vmax."""
    return a + (b - a) * (b < a)


@dataclass(frozen=True)
class Ceilings:
    """What one device allows, with the efficiency of each operator class applied."""

    peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    efficiency: dict
    op_fixed_s: float = 0.0
    """What one operator costs beyond its roofline time (eager dispatch on a CPU, a kernel
    launch on a GPU): `micro.overhead` measures it, defaults.OP_FIXED_S_GPU otherwise."""
    op_fixed_cold_s: float = 0.0
    """`op_fixed_s` with the host's caches emptied first (a CPU: `micro.overhead`); 0 where
    not measured. A forward that streams more than the last-level cache pays its fixed costs
    nearer this (layertime.cold_cache_scale)."""
    forward_fixed_s: float = 0.0
    """What one forward of a model pays outside its decoder layers (mask and rotary set-up,
    embedding, final norm, head), beyond their roofline time."""
    cache_update_s: float = 0.0
    """What one decoder layer's inference forward pays to update its KV cache beyond the
    bytes it appends (the cache's Python and the concatenation's dispatch): `micro.overhead`
    measures it; 0 where not measured."""
    generate_step_s: float = 0.0
    """What `generate` pays per step outside the model (logits processing, the pick, stopping
    checks, cache bookkeeping)."""
    generate_call_s: float = 0.0
    """What one `generate` call pays before its first token beyond the prompt's forward
    (set-up of the generation config, processors and cache; the first pick)."""
    optimizer_tensor_s: float = 0.0
    """What the optimizer's step and zero_grad pay per parameter tensor beyond its bytes
    (micro.overhead; 0 where not measured: on a GPU torch's foreach AdamW runs one kernel per
    operator for a whole group of tensors)."""
    optimizer_cached_bytes_per_s: float = 0.0
    """The rate of AdamW's unfused passes over a tensor whose working set stays in the
    last-level cache, as the passes count bytes (micro.optimizer_rates); 0: not measured."""
    serve_engine_step_s: float = 0.0
    """What transformers' continuous-batching engine pays per iteration beyond the model
    (micro.serve_engine; 0 where not measured)."""
    serve_engine_layer_s: float = 0.0
    """... and per decoder layer of the model, per iteration (its paged cache's bookkeeping)."""
    serve_engine_seq_s: float = 0.0
    """... and per sequence in the iteration's batch."""
    cache_bytes: float = 0.0
    """A CPU's last-level cache (what `peak` read from sysfs); 0: no reuse between operators
    is counted (GPUs, whose foreach kernels sweep every tensor per operator)."""
    gemm_efficiency_by_flops: tuple = ()
    """Measured (flops, efficiency) points of GEMMs by size (`bench ops`), ascending."""
    experts_efficiency_by_rows: tuple = ()
    """Measured (rows per expert, efficiency) of a MoE layer's grouped expert GEMMs (`bench
    ops` on a MoE model), ascending; () prices them as ordinary GEMMs of their size."""
    attention_efficiency_by_seq: tuple = ()
    """Measured (sequence length, efficiency) of the fused attention kernel's forward (`bench
    ops` at several lengths), ascending; () prices every attention at the class's efficiency."""
    attention_bwd_efficiency_by_seq: tuple = ()
    """... and of its backward (its FLOPs twice the forward's, op_costs.attention)."""
    memory_efficiency_by_tokens: tuple = ()
    """Measured (tokens, efficiency) of a layer's element-wise forward operators (RMSNorm,
    RoPE, SwiGLU; `bench ops` at several token counts), ascending; () takes the class's."""
    gemm_grid: tuple = ()
    """Measured efficiency of a product of M rows, K inputs and N outputs (`peak`,
    micro.gemm_grid): (rows, k, n, efficiency[i][j][l]); () where not measured."""
    asynchronous: bool = False
    """Operators are queued to the device and run while the host launches the next ones (a
    GPU): a run of them takes the longer of their kernels and their launches, not the sum
    (layertime.launch_bound). A CPU's operators run in the calling thread: the sum."""
    gemm_peak_scale: float = 1.0
    """GEMMs run at this multiple of `peak_flops_per_s` (FP8 weights and activations on a
    device whose FP8 peak is twice its bf16 one: 2); attention and the rest do not."""

    def gemm_flops_per_s(self, flops=None, shape=None):
        """The GEMM rate: at the efficiency `peak` measured for that (M, K, N) shape where it
        measured a grid, else at the efficiency `bench ops` measured for GEMMs of that many
        FLOPs (log-linear between its points, flat beyond them), else the class's."""
        peak = self.peak_flops_per_s * self.gemm_peak_scale
        if self.grid_applies(shape):
            return peak * gemm_grid_efficiency(self.gemm_grid, *shape)
        return peak * gemm_efficiency(self, flops)

    def grid_applies(self, shape) -> bool:
        """A measured grid and a scalar (M, K, N) to look up (advise's arrays take the class)."""
        return shape is not None and bool(self.gemm_grid) and all(isinstance(v, (int, float)) for v in shape)

    def attention_flops_per_s(self, seq=None, backward=False) -> float:
        """The fused attention's rate: at the forward (or backward) efficiency `bench ops`
        measured at that sequence length where given and measured (log-linear between
        lengths, held beyond), else the class's (forward and backward rows together)."""
        curve = self.attention_bwd_efficiency_by_seq if backward else self.attention_efficiency_by_seq
        eff = _interpolate_log(curve, seq) if curve and _scalar(seq) else self.efficiency["attention"]
        return self.peak_flops_per_s * eff

    def bytes_per_s(self, tokens=None) -> float:
        """The element-wise rate: at the efficiency `bench ops` measured for a layer's
        element-wise operators at that many tokens where given and measured (log-linear
        between counts, held beyond), else the class's."""
        curve = self.memory_efficiency_by_tokens
        eff = _interpolate_log(curve, tokens) if curve and _scalar(tokens) else self.efficiency["memory"]
        return self.memory_bandwidth_bytes_per_s * eff


def _scalar(x) -> bool:
    """A positive number (advise's numpy arrays take the class's efficiency)."""
    return isinstance(x, (int, float)) and x > 0


def experts_gemm_time_s(c: Ceilings, flops, nbytes, rows):
    """The routed experts' GEMMs of one layer, at the efficiency `bench ops` measured for
    grouped expert GEMMs of `rows` tokens per expert (log-linear between measured points, flat
    above them), against the memory floor. None where not measured, below the fewest rows
    measured (decode's one or two tokens per expert: the GEMM grid prices those weight reads)
    or for arrays (advise)."""
    points = c.experts_efficiency_by_rows
    if not points or not isinstance(rows, (int, float)) or rows < points[0][0]:
        return None
    eff = _interpolate_log(points, rows)
    return op_time_s(flops, nbytes, c.peak_flops_per_s * c.gemm_peak_scale * eff, c.memory_bandwidth_bytes_per_s)


def _interpolate_log(points, x):
    """y at x among ascending (x, y) points: log-linear in x between them, held beyond."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) if x1 > x0 else 1.0
            return y0 + w * (y1 - y0)
    return points[-1][1]


def gemm_efficiency(c: Ceilings, flops=None):
    """Fraction of the peak a GEMM of `flops` reaches: small GEMMs reach less of it (the
    measured `gemm_by_flops` curve of `bench ops`), log-linear in flops between measured
    points. Scalars only take the curve; arrays (advise) take the class's efficiency."""
    points = c.gemm_efficiency_by_flops
    if flops is None or not points or not isinstance(flops, (int, float)):
        return c.efficiency["gemm"]
    return _interpolate_log(points, flops)


def _bracket(points, x):
    """(index below, index above, weight of the one above) of x among ascending grid points,
    log-linear, held at the edges."""
    if x <= points[0]:
        return 0, 0, 0.0
    for i in range(len(points) - 1):
        if x <= points[i + 1]:
            return i, i + 1, (math.log(x) - math.log(points[i])) / (math.log(points[i + 1]) - math.log(points[i]))
    return len(points) - 1, len(points) - 1, 0.0


def gemm_grid_efficiency(grid, m, k, n):
    """Efficiency of an M x K x N product from a measured grid: trilinear in log M, log K and
    log N between its points, the edge values beyond them."""
    rows, ks, ns, eff = grid
    (i0, i1, wi), (j0, j1, wj), (n0, n1, wn) = _bracket(rows, m), _bracket(ks, k), _bracket(ns, n)
    total = 0.0
    for i, a in ((i0, 1 - wi), (i1, wi)):
        for j, b in ((j0, 1 - wj), (j1, wj)):
            for x, c in ((n0, 1 - wn), (n1, wn)):
                total += a * b * c * eff[i][j][x]
    return total


def op_time_s(flops, nbytes, flops_per_s, bytes_per_s):
    """The roofline time of one operator given effective compute and memory rates."""
    return vmax(flops / flops_per_s, nbytes / bytes_per_s)


def gemm_time_s(c: Ceilings, flops, nbytes, shape=None, activation_bytes=0.0):
    """A matrix multiply: compute-bound at large sizes, weight-read-bound at batch 1 decode
    (its reads at the `weights` efficiency of the bandwidth, defaults.DEFAULT_EFFICIENCY).
    Given its (M, K, N) `shape` and a measured grid, the grid's time already holds the
    weight's read from memory (micro.gemm_grid streams it), so the memory side is only the
    measured bandwidth itself, a floor no product goes below. `activation_bytes` (its input
    and output, op_costs.linear_io_bytes) add gemm_activation_time_s on top.

    On a GPU priced from its datasheet (no measured grid) the compute time and the weights'
    read add up (gemm_unhidden_time_s), where the roofline takes the longer."""
    if c.grid_applies(shape):
        t = op_time_s(flops, nbytes, c.gemm_flops_per_s(flops, shape), c.memory_bandwidth_bytes_per_s)
    else:
        stream = c.memory_bandwidth_bytes_per_s * c.efficiency.get("weights", c.efficiency["memory"])
        rate = c.gemm_flops_per_s(flops)
        weight_bytes = vmax(nbytes - activation_bytes, 0.0 * nbytes)  # `nbytes` counts the activations too
        t = gemm_unhidden_time_s(flops, weight_bytes, nbytes, rate, stream) if c.asynchronous else \
            op_time_s(flops, nbytes, rate, stream)
    return t + gemm_activation_time_s(c, activation_bytes)


def gemm_unhidden_time_s(flops, weight_bytes, nbytes, flops_per_s, bytes_per_s):
    """A GPU product's time as its compute time plus the time to read its weights, at least
    all its bytes' time. The roofline's max supposes a kernel hides its memory traffic behind
    its compute entirely (Williams et al. 2009 take the overlap as complete). A product's
    input rows are shared by every tile of their row of the output and re-read from L2; its
    weights are read from memory once, each slice by the one tile that uses it, and a product
    of few rows does too little arithmetic on each slice to hide its arrival. The published
    GPU points side with the sum where the two times are alike, a product of a hundred-odd
    rows near the ridge point: TensorRT-LLM v0.5's first-token latency of a 128-token prompt
    on an A100 (docs/source/performance.md, "Low Latency") is 16 ms for Llama-2 7B and 47 ms
    for 70B on 4 GPUs, where compute (7.8, 20.5 ms at the class's efficiency) and the
    weights' read (9.5, 24.8 ms) priced as the longer gave 10.5 and 29.7 ms, as this 17.6
    and 49.2 ms (validate --published: 0.65x -> 1.10x, 0.63x -> 1.05x); a decode step of
    240 sequences on 4 A100s (70B, v0.6.1) 1.85x -> 1.32x. It adds the read however many
    rows share it: a few per cent to training's products of thousands of rows and to batch-1
    decode's, but 18 % to a 512-token micro-batch's forward on an A800 and 5-9 % to a
    2,048-token prompt (where the max was within 4 %); a measured grid replaces it."""
    return vmax(flops / flops_per_s + weight_bytes / bytes_per_s, nbytes / bytes_per_s)


def gemm_activation_time_s(c: Ceilings, activation_bytes):
    """What a CPU product pays in a model beyond its measured time: moving its input and
    output at the element-wise memory rate, not hidden behind its compute. The grid and
    `bench ops` time each product in a loop that keeps its activations in the core's caches;
    in a forward, its input was just written by another operator (on either core) and its
    output goes to a buffer that is not cached. Timed per projection in tiny-llama's
    forward at 2 x 128 tokens on a 2-core VM, each ran 17-37 % longer than alone (a layer's
    seven: 437 us more), and its input and output bytes at the element-wise rate come to
    415 us. GPUs, whose grid reads activations from device memory in every call too: 0."""
    return 0.0 * activation_bytes if c.asynchronous else activation_bytes / c.bytes_per_s()


def attention_time_s(c: Ceilings, flops, nbytes, seq=None, backward=False):
    """A fused attention kernel (sdpa / flash), or eager attention's two matmuls; `seq` (a
    pass over sequences of that length) takes the measured efficiency by length."""
    return op_time_s(flops, nbytes, c.attention_flops_per_s(seq, backward), c.bytes_per_s())


def memory_time_s(c: Ceilings, nbytes, tokens=None):
    """An element-wise operator (norm, RoPE, SwiGLU, residual add, softmax): bytes / bandwidth;
    `tokens` (a layer's operators over that many tokens) takes the measured efficiency by
    token count: on a CPU a small operator's time is mostly its dispatch and it runs on one
    thread (ATen splits element-wise loops only above 32,768 elements, at::internal::GRAIN_SIZE
    in ATen/Parallel.h), so the rate per byte rises with the tokens (tiny-llama's RMSNorm,
    RoPE and SwiGLU: 11 GB/s at 64 tokens, 28 GB/s at 512, on a 2-core VM)."""
    return nbytes / c.bytes_per_s(tokens)
