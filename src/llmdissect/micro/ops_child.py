"""`bench ops`, the child side: every operator of a model's decoder layer at its real shapes,
timed with the one timer and loop policy, each row placed against its roofline.

Ceilings: the dense matmul peak of the dtype and the memory bandwidth from the calibration
profile (`llmdissect peak`), or measured here quickly when the profile has none (the record
says which). Small operators run from the caches, faster than DRAM allows, so the bandwidth
ceiling of an operator is the copy bandwidth measured here at the smallest working set that
holds its bytes (a cache-aware roofline, Ilic, Pratas and Sousa, IEEE CAL 2014), never below
the DRAM bandwidth. Should a row still beat a ceiling, that ceiling is raised to the row's
rate and the record lists it (`ceilings.raised`): a fraction of peak never exceeds 1.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from llmdissect.micro.ops_cases import SDPA_BACKENDS, OpCase

LADDER_BYTES = (32 * 2**10, 256 * 2**10, 2 * 2**20, 16 * 2**20)


class OpsConfig(BaseModel):
    """One `bench ops` run."""

    model: str = "tiny-llama"
    tokens: int = Field(512, ge=1)
    """Tokens through the layer (batch x sequence); attention splits them into sequences."""
    passes: Literal["fwd", "bwd", "both"] = "both"
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    seqs: Optional[list[int]] = None
    """Attention sequence lengths (default: tokens/4, tokens/2, tokens, at least 16)."""
    quant: bool = True
    min_time_s: float = Field(0.2, ge=0)
    device: str = "cpu"
    seed: int = 0
    model_config = {"extra": "forbid"}


def default_seqs(tokens: int, max_len: int) -> list[int]:
    top = min(tokens, max_len)
    return sorted({max(16, min(top, s)) for s in (top // 4, top // 2, top)})


def sdpa_backends(device: str) -> list[str]:
    """math and flash on CPU; also memory-efficient and cuDNN on CUDA (a backend that cannot
    run the inputs is left out at run time, with its reason)."""
    names = ["math", "flash"]
    if device.startswith("cuda"):
        names += ["efficient", "cudnn"]
    from torch.nn.attention import SDPBackend

    return [n for n in names if hasattr(SDPBackend, SDPA_BACKENDS[n])]


def build_cases(cfg: OpsConfig) -> tuple[list[OpCase], list[str]]:
    """Every case of the run, and the reasons for those left out."""
    from llmdissect.dtypes import dtype_bytes, torch_dtype
    from llmdissect.micro import ops_cases as oc
    from llmdissect.micro.ops_quant import quant_cases
    from llmdissect.specs.models import get_model

    spec = get_model(cfg.model)
    T, e = cfg.tokens, dtype_bytes(cfg.dtype)
    seed = [cfg.seed]

    def maker() -> oc.Maker:
        seed[0] += 1  # each case its own fixed stream
        return oc.Maker(cfg.device, torch_dtype(cfg.dtype), seed[0])

    h, f, qd, kvd, V = spec.hidden_size, spec.intermediate_size, spec.q_dim, spec.kv_dim, spec.vocab_size
    passes = ["fwd", "bwd"] if cfg.passes == "both" else [cfg.passes]
    seqs = cfg.seqs or default_seqs(T, spec.max_position_embeddings)
    cases: list[OpCase] = []
    for p in passes:
        cases += oc.elementwise_cases(maker, spec, T, e, p, max(seqs))
        for name, k, n in (("q_proj", h, qd), ("k_proj", h, kvd), ("v_proj", h, kvd), ("o_proj", qd, h),
                           ("gate_proj", h, f), ("up_proj", h, f), ("down_proj", f, h), ("lm_head", h, V)):
            cases.append(oc.linear_case(maker, name, T, k, n, e, p))
        for s in seqs:
            for backend in ["eager", *sdpa_backends(cfg.device)]:
                cases.append(oc.attention_case(maker, spec, max(1, T // s), s, e, p, backend))
    if "bwd" in passes:
        cases.append(oc.adamw_case(maker, spec))
    skipped: list[str] = []
    if cfg.quant:
        qcases, skipped = quant_cases(maker, spec, T, e, cfg.dtype, cfg.device)
        cases += qcases
    for c in cases:
        c.dtype = c.dtype or cfg.dtype
    return cases, skipped


def bandwidth_ceiling(nbytes: float, points: list[tuple[float, float]], dram: float) -> float:
    """The fastest rate among (bytes moved, bytes/s) points of at least `nbytes`, or DRAM's."""
    return max([bw for moved, bw in points if moved >= nbytes] + [dram])


def raw_row(case: OpCase, stats: Any) -> dict[str, Any]:
    """A row's measured part: time Stats, FLOPs, bytes and the rates."""
    t = stats.median
    return {"op": case.op, "shape": case.shape, "dtype": case.dtype, "pass": case.passes, "class": case.cls,
            "time_s": stats.to_dict(), "flops": case.cost.flops, "bytes": case.cost.bytes,
            "intensity": case.cost.intensity, "flops_per_s": case.cost.flops / t, "bytes_per_s": case.cost.bytes / t}


def place_rows(rows: list[dict[str, Any]], peaks: dict[str, float], ladder: list[tuple[float, float]],
               dram: float) -> list[str]:
    """Add each row's ceilings and `peak_fraction` (docs/metrics.md: the larger of
    flops_per_s / peak and bytes_per_s / bandwidth). A ceiling is the measured one, raised to
    any rate a row of this run reached beyond it (FLOP/s per dtype; bytes/s at the same or a
    larger working set), so no fraction exceeds 1. Returns what was raised, for the record."""
    raised = []
    top: dict[str, float] = {}
    for r in rows:
        top[r["dtype"]] = max(top.get(r["dtype"], 0.0), r["flops_per_s"])
    points = ladder + [(r["bytes"], r["bytes_per_s"]) for r in rows]
    for r in rows:
        measured_peak = peaks[r["dtype"]]
        peak = max(measured_peak, top[r["dtype"]])
        bw_measured = bandwidth_ceiling(r["bytes"], ladder, dram)
        bw = bandwidth_ceiling(r["bytes"], points, dram)
        if r["flops_per_s"] > measured_peak:
            raised.append(f"{r['op']} {r['pass']}: {r['flops_per_s']:.4g} FLOP/s above the measured peak")
        if r["bytes_per_s"] > bw_measured:
            raised.append(f"{r['op']} {r['pass']}: {r['bytes_per_s']:.4g} B/s above the measured copy rate")
        r.update(peak_flops_per_s=peak, bandwidth_ceiling_bytes_per_s=bw,
                 peak_fraction=max(r["flops_per_s"] / peak, r["bytes_per_s"] / bw),
                 bound="compute" if r["intensity"] >= peak / bw else "memory")
    return raised
