"""FLOPs and fewest bytes of each operator of a Llama decoder layer (docs/metrics.md "Operators").

Pure arithmetic, no torch, each function one operator in one pass, so tests check them
against hand-computed closed forms. Conventions:

- A multiply-add is 2 FLOPs. `e` is bytes per element of the compute dtype.
- `bytes` is the fewest bytes that must move: each input read once, each output written once
  (caches and re-reads not counted), so bytes_per_s is a lower bound on the traffic.
- Linear layers: X [T, k], W [n, k] (out x in, as nn.Linear), Y [T, n]. Forward 2Tkn;
  backward 4Tkn (dX = dY W and dW = dY^T X).
- Attention: causal, b sequences of s tokens, a query heads and g key/value heads of width d.
  Only the useful (unmasked) pairs count, s(s+1)/2 per head, for every backend alike, so
  their rates compare: forward QK^T and PV, 2 d s(s+1) per head; backward four products
  (dV, dP, dQ, dK), twice that. The eager path also materialises b a s^2 scores.
- Element-wise FLOPs are nominal (they are memory-bound): RMSNorm 4 per element, RoPE 3,
  SiLU x gate 5, softmax 5, cross-entropy 4 per logit; a backward counts twice its forward.
- The loss runs on fp32 logits (transformers upcasts them). AdamW keeps fp32 parameters,
  gradients and two moments: 7 x 4 bytes and 13 FLOPs per parameter per step.
- Quantized weights: NF4 is 4 bits per weight plus one fp32 absmax per block of 64;
  LLM.int8 and torchao int8 are 1 byte per weight plus one fp32 scale per output row.
"""
from __future__ import annotations

from dataclasses import dataclass

NF4_BLOCK = 64
ADAMW_FLOPS_PER_PARAM = 13  # m: 3, v: 4, bias-corrected update: 5, decoupled weight decay: 1
ADAMW_BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v; fp32 each


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte (the roofline's x axis)."""
        return self.flops / self.bytes


def _bwd(passes: str) -> bool:
    if passes not in ("fwd", "bwd"):
        raise ValueError(f"pass must be fwd or bwd, got {passes!r}")
    return passes == "bwd"


def linear(T: int, k: int, n: int, e: float, passes: str = "fwd") -> Cost:
    """Y = X W^T. fwd: read X, W, write Y. bwd: read dY, W, X; write dX, dW."""
    if _bwd(passes):
        return Cost(4 * T * k * n, e * (T * n + 2 * k * n + 2 * T * k))
    return Cost(2 * T * k * n, e * (T * k + k * n + T * n))


def attention(b: int, s: int, a: int, g: int, d: int, e: float, passes: str = "fwd") -> Cost:
    """Causal attention core. fwd: read q [b,a,s,d], k, v [b,g,s,d]; write o [b,a,s,d].
    bwd: read q, k, v, o, dO; write dq, dk, dv."""
    pairs = s * (s + 1) / 2
    fwd_flops = b * a * 2 * 2 * d * pairs  # two products over the unmasked pairs
    if _bwd(passes):
        return Cost(2 * fwd_flops, e * b * s * d * (4 * a + 4 * g))
    return Cost(fwd_flops, e * b * s * d * (2 * a + 2 * g))


def softmax(rows: int, cols: int, e: float, passes: str = "fwd") -> Cost:
    """Softmax over the last axis. fwd: read x, write y. bwd: read y, dy; write dx."""
    n = rows * cols
    if _bwd(passes):
        return Cost(2 * 5 * n, 3 * e * n)
    return Cost(5 * n, 2 * e * n)


def rmsnorm(T: int, h: int, e: float, passes: str = "fwd") -> Cost:
    """y = x / rms(x) * w. fwd: read x, w; write y. bwd: read x, w, dy; write dx, dw."""
    if _bwd(passes):
        return Cost(2 * 4 * T * h, e * (3 * T * h + 2 * h))
    return Cost(4 * T * h, e * (2 * T * h + h))


def rope(T: int, q_dim: int, kv_dim: int, d: int, e: float, passes: str = "fwd") -> Cost:
    """q, k <- x cos + rotate_half(x) sin. Reads q, k, cos [T,d], sin [T,d]; writes q, k
    (the same in backward, with dq, dk in place of q, k)."""
    n = T * (q_dim + kv_dim)
    return Cost((2 if _bwd(passes) else 1) * 3 * n, e * (2 * n + 2 * T * d))


def swiglu(T: int, f: int, e: float, passes: str = "fwd") -> Cost:
    """silu(gate) * up. fwd: read gate, up; write y. bwd: read gate, up, dy; write dgate, dup."""
    if _bwd(passes):
        return Cost(2 * 5 * T * f, 5 * e * T * f)
    return Cost(5 * T * f, 3 * e * T * f)


def embedding(T: int, V: int, h: int, e: float, passes: str = "fwd") -> Cost:
    """fwd: read T int64 ids and T rows of the table; write T rows. bwd: read ids and dY,
    write the dense table gradient [V, h] (one add per element of dY)."""
    if _bwd(passes):
        return Cost(T * h, 8 * T + e * T * h + e * V * h)
    return Cost(0, 8 * T + 2 * e * T * h)


def cross_entropy(T: int, V: int, passes: str = "fwd") -> Cost:
    """Mean NLL of log-softmax over fp32 logits [T, V]. fwd: read logits and int64 targets,
    write one scalar. bwd: read logits and targets, write dlogits."""
    if _bwd(passes):
        return Cost(2 * 4 * T * V, 4 * T * V + 8 * T + 4 * T * V)
    return Cost(4 * T * V, 4 * T * V + 8 * T + 4)


def adamw(params: int) -> Cost:
    """One AdamW step over `params` fp32 parameters."""
    return Cost(ADAMW_FLOPS_PER_PARAM * params, ADAMW_BYTES_PER_PARAM * params)


def quant_storage_bytes(k: int, n: int, scheme: str) -> float:
    """Bytes of a quantized W [n, k]: codes plus scales."""
    if scheme == "nf4":
        return k * n / 2 + 4 * k * n / NF4_BLOCK
    if scheme == "int8":
        return k * n + 4 * n
    raise ValueError(f"unknown scheme {scheme!r}")


def quantize(k: int, n: int, e: float, scheme: str) -> Cost:
    """Read W in the compute dtype, write codes and scales (FLOPs not counted: memory-bound)."""
    return Cost(0, e * k * n + quant_storage_bytes(k, n, scheme))


def dequantize(k: int, n: int, e: float, scheme: str) -> Cost:
    """Read codes and scales, write W in the compute dtype."""
    return Cost(0, quant_storage_bytes(k, n, scheme) + e * k * n)


def quant_linear(T: int, k: int, n: int, e: float, scheme: str) -> Cost:
    """Y = X W^T with W stored quantized: 2Tkn FLOPs, reading the quantized weight."""
    return Cost(2 * T * k * n, e * T * k + quant_storage_bytes(k, n, scheme) + e * T * n)
