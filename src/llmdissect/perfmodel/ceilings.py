"""Where the model's ceilings come from: the hardware spec, overridden by calibration.

Priority, lowest first: `defaults.DEFAULT_EFFICIENCY`, the hardware TOML's `[efficiency]`,
then the calibration profile (`llmdissect.calibration_profile`, written by `peak`, `bench ops` and
`bench comm`). A profile describes one machine, so it applies when the target is this
machine's CPU, when its `gpus` section names the target device, or when the user passed it
explicitly with `--calibration FILE`. Collective fits come from `collectives.<backend>`
(nccl for GPUs, gloo for CPUs).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.perfmodel.comm import Network, default_latency_s
from llmdissect.perfmodel.defaults import (
    DEFAULT_EFFICIENCY,
    FLASH3_ATTENTION_EFFICIENCY,
    OP_FIXED_S_GPU,
    assumptions_for,
    efficiency_for,
)
from llmdissect.perfmodel.roofline import Ceilings
from llmdissect.specs.hardware import HardwareSpec, Platform


@dataclass(frozen=True)
class Machine:
    """A platform as the model sees it: ceilings of one device, its network, host link."""

    platform: Platform
    ceilings: Ceilings | None
    """None where the peaks are unknown (an uncalibrated CPU): no time estimate then."""
    network: Network
    host_link: Network | None
    efficiency: dict
    sources: dict
    """Where each number came from (spec, profile, default), for the record."""
    assumptions: dict
    """Framework allowance, overlap fraction, CPU Adam rate (defaults.assumptions_for,
    overridden by the profile's `perfmodel` section)."""
    scale_out: Network | None = None
    """The network between nodes, per device, where the platform spans more than one node
    of the device's reference server (None: every device on `network`)."""
    node_devices: int = 0


def _with_efficiency(mach: Machine, ceilings_changes: dict | None = None, **efficiency: float) -> Machine:
    """`mach` with some operator classes' efficiencies replaced, in its ceilings and in the
    efficiencies its record's notes print."""
    ceilings = replace(mach.ceilings, efficiency=dict(mach.ceilings.efficiency, **efficiency),
                       **(ceilings_changes or {}))
    return replace(mach, ceilings=ceilings, efficiency=dict(mach.efficiency, **efficiency))


def with_weight_stream_scale(mach: Machine, scale: float) -> Machine:
    """`mach` with its products streaming their weights at `scale` x its `weights` efficiency
    (a quantized kernel's dequantization: weights.WEIGHT_STREAM_SCALE)."""
    if scale == 1.0 or mach.ceilings is None:
        return mach
    eff = mach.ceilings.efficiency
    return _with_efficiency(mach, weights=eff.get("weights", eff["memory"]) * scale)


def with_accumulate(mach: Machine, accumulate: str) -> Machine:
    """`mach` with its products at the device's fp16-accumulate peak where `accumulate` is fp16
    (HardwareSpec.fp16_accumulate_flops_per_s: twice the fp32-accumulate rate on GeForce parts,
    the same on data-centre ones, which catalogue none)."""
    hw = mach.platform.device
    fast, base = hw.fp16_accumulate_flops_per_s, hw.peak("fp16")
    if accumulate != "fp16" or not fast or not base or mach.ceilings is None:
        return mach
    return replace(mach, ceilings=replace(mach.ceilings, gemm_peak_scale=mach.ceilings.gemm_peak_scale * fast / base))


def with_attention_kernel(mach: Machine, attn: str) -> Machine:
    """`mach` with its fused attention at FlashAttention-3's rate where `attn` is flash3
    (defaults.FLASH3_ATTENTION_EFFICIENCY), its measured curves (another kernel's) set aside."""
    if attn != "flash3" or mach.ceilings is None:
        return mach
    return _with_efficiency(mach, {"attention_efficiency_by_seq": (), "attention_bwd_efficiency_by_seq": ()},
                            attention=FLASH3_ATTENTION_EFFICIENCY)


def _profile_section(hw: HardwareSpec, profile: dict[str, Any], explicit: bool) -> dict[str, Any] | None:
    if not profile:
        return None
    if hw.kind == "cpu":
        return profile.get("cpu", {})
    # `peak` and `bench ops` key GPUs by torch's device name ("NVIDIA H100 80GB HBM3")
    names = [n.lower() for n in (hw.name, *hw.aliases)]
    for key, section in (profile.get("gpus") or {}).items():
        k = key.lower()
        if k in names or any(n in k for n in names):
            return section
    return {} if explicit else None


def _efficiency(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UserError(f"calibration efficiency {key!r} must be a fraction in (0, 1], got {value!r}")
    return float(value)


def _collective_source(fits: dict, backend: str, n: int) -> str:
    """Which collective model the estimate uses at `n` ranks, per operation."""
    used = sorted(op for op, (_, _, nproc) in fits.items() if not nproc or nproc == n)
    if not used:
        measured = sorted({nproc for _, _, nproc in fits.values()})
        return "alpha-beta defaults" + (f" (the {backend} fits were measured at {measured} processes, not {n})"
                                        if measured else "")
    return f"calibration profile: {backend} fits at {n} processes for {', '.join(used)}; defaults for the rest"


FIXED_COST_KEYS = ("op_fixed_s", "op_fixed_cold_s", "forward_fixed_s", "cache_update_s", "generate_step_s",
                   "generate_call_s", "serve_engine_step_s", "serve_engine_layer_s", "serve_engine_seq_s",
                   "optimizer_tensor_s")
MEASURED_RATE_KEYS = ("optimizer_cached_bytes_per_s",)
"""Rates `peak` measures beside the fixed costs (micro.optimizer_rates); 0: not measured."""


def _fixed_costs(kind: str, section: dict[str, Any] | None, sources: dict) -> dict[str, float]:
    """The fixed costs per operator, per forward, per generate call and step (micro.overhead):
    measured in the profile's section, else a GPU's published launch cost, else 0."""
    from llmdissect.perfmodel.op_costs import MODEL_EDGE_OPS

    measured = {k: float(v) for k, v in (section or {}).items()
                if k in FIXED_COST_KEYS + MEASURED_RATE_KEYS and isinstance(v, (int, float))
                and not isinstance(v, bool) and v >= 0}
    if "op_fixed_s" in measured:
        sources["fixed_costs"] = "calibration profile (llmdissect peak)"
        return {k: measured.get(k, 0.0) for k in FIXED_COST_KEYS + MEASURED_RATE_KEYS}
    if kind == "gpu":
        sources["fixed_costs"] = "kernel launch default (defaults.OP_FIXED_S_GPU); generate's own step not modelled"
        return {**dict.fromkeys(FIXED_COST_KEYS, 0.0), "op_fixed_s": OP_FIXED_S_GPU,
                "forward_fixed_s": len(MODEL_EDGE_OPS) * OP_FIXED_S_GPU}
    sources["fixed_costs"] = "none: not measured on this machine (run `llmdissect peak`)"
    return dict.fromkeys(FIXED_COST_KEYS, 0.0)


def _size_curve(section: dict[str, Any] | None, key: str) -> tuple:
    """A profile's (size, efficiency) points measured by `bench ops`, ascending; malformed
    points are dropped."""
    points = (section or {}).get(key) or ()
    return tuple(sorted(tuple(map(float, pt)) for pt in points
                        if isinstance(pt, (list, tuple)) and len(pt) == 2 and pt[0] > 0 and 0 < pt[1] <= 1))


def _gemm_grid(table: Any, dtype: str, sources: dict[str, str]) -> tuple:
    """The (rows, k, n, efficiency) grid `peak` measured (micro.gemm_grid), if it was measured
    in the estimate's dtype and is well formed; else () and the FLOPs curve or class applies."""
    if not isinstance(table, dict) or table.get("dtype") != dtype:
        return ()
    try:
        axes = tuple(tuple(float(v) for v in table[a]) for a in ("rows", "k", "n"))
        eff = tuple(tuple(tuple(float(v) for v in row) for row in plane) for plane in table["efficiency"])
    except (KeyError, TypeError, ValueError):
        return ()
    shape_ok = len(eff) == len(axes[0]) and all(len(p) == len(axes[1]) and all(len(r) == len(axes[2]) for r in p)
                                                for p in eff)
    if not shape_ok or not all(0 < v <= 1 for p in eff for r in p for v in r) \
            or any(list(a) != sorted(set(a)) or a[0] <= 0 for a in axes):
        return ()
    sources["gemm"] = f"calibration profile: {dtype} GEMM efficiency by (M, K, N), weights streamed from memory"
    return (*axes, eff)


def one_thread_gemm_grid(section: dict[str, Any] | None, dtype: str) -> tuple:
    """The GEMM grid `peak` measured with one thread on a CPU of several (micro.peak_child,
    against one thread's share of the peak), or () where there is none in `dtype`."""
    return _gemm_grid((section or {}).get("gemm_efficiency_by_shape_one_thread"), dtype, {})


def machine_for(platform: Platform, dtype: str, profile: dict[str, Any] | None = None,
                explicit: bool = False) -> Machine:
    """Ceilings and network of `platform` for compute dtype `dtype`."""
    hw = platform.device
    profile = profile or {}
    section = _profile_section(hw, profile, explicit)
    applies = section is not None
    eff = efficiency_for(hw.architecture, hw.gemm_mamf_fraction) if hw.kind == "gpu" else dict(DEFAULT_EFFICIENCY)
    sources = {"efficiency": "defaults"}
    if hw.efficiency:
        eff.update(hw.efficiency)
        sources["efficiency"] = "hardware spec"
    for table in ((profile.get("efficiency") if applies else None), (section or {}).get("efficiency")):
        if isinstance(table, dict) and table:  # the device's own section wins over the top level
            eff.update({k: _efficiency(v, k) for k, v in table.items() if k in eff})
            sources["efficiency"] = "calibration profile"
    if hw.kind == "cpu" and "weights" not in (hw.efficiency or {}):
        eff["weights"] = eff["memory"]  # a CPU's GEMMs stream at its measured grid, or as its element-wise ops
    peak = hw.peak(dtype)
    bandwidth = hw.memory_bandwidth_bytes_per_s
    if applies and section:
        peak = (section.get("peak_flops_per_s") or {}).get(dtype, peak)
        bandwidth = section.get("memory_bandwidth_bytes_per_s") or bandwidth
    sources["peak"] = "calibration profile" if applies and section and section.get("peak_flops_per_s") else \
        ("hardware spec" if peak else "unknown")
    # N processes on one CPU share its cores and its memory: each gets 1/N of what `peak`
    # measured with all of them (the launcher gives each process cores // N threads)
    shared = platform.num_devices if hw.kind == "cpu" else 1
    if shared > 1:
        sources["sharing"] = f"{shared} processes share one CPU: 1/{shared} of its peak and bandwidth each"
    fixed = _fixed_costs(hw.kind, section if applies else None, sources)
    curve, experts, attention, attention_bwd, memory = (_size_curve(section if applies else None, key) for key in (
        "gemm_efficiency_by_flops", "experts_efficiency_by_rows", "attention_efficiency_by_seq",
        "attention_bwd_efficiency_by_seq", "memory_efficiency_by_tokens"))
    cache = (section or {}).get("last_level_cache_bytes") if applies and hw.kind == "cpu" else None
    cache = float(cache) / shared if isinstance(cache, (int, float)) and cache > 0 else 0.0
    grid = _gemm_grid((section or {}).get("gemm_efficiency_by_shape") if applies else None, dtype, sources)
    fixed.update({k: fixed[k] / shared for k in MEASURED_RATE_KEYS if k in fixed})
    ceilings = Ceilings(float(peak) / shared, float(bandwidth) / shared, eff, gemm_efficiency_by_flops=curve,
                        experts_efficiency_by_rows=experts, attention_efficiency_by_seq=attention,
                        attention_bwd_efficiency_by_seq=attention_bwd,
                        memory_efficiency_by_tokens=memory, gemm_grid=grid, cache_bytes=cache,
                        asynchronous=hw.kind == "gpu", **fixed) \
        if peak and bandwidth else None
    link = platform.interconnect or hw.link
    backend = "gloo" if hw.kind == "cpu" else "nccl"
    fits = {}
    if applies:
        for op, fit in (profile.get("collectives", {}).get(backend) or {}).items():
            if isinstance(fit, dict) and mn.ALPHA_S in fit and mn.BETA_S_PER_BYTE in fit:
                fits[op] = (float(fit[mn.ALPHA_S]), float(fit[mn.BETA_S_PER_BYTE]), int(fit.get("nproc") or 0))
    if link is not None:
        base, alpha = default_latency_s(link.kind)
        network = Network(link.unidirectional_bytes_per_s, alpha, eff["comm"], fits, base_s=base)
    else:  # one host's processes talk through its memory
        base, alpha = default_latency_s("cpu")
        network = Network(float(bandwidth or 10e9) / 4, alpha, eff["comm"], fits, base_s=base)
    sources["collectives"] = _collective_source(fits, backend, platform.num_devices)
    scale_out = _scale_out(hw, platform.num_devices, eff["comm"], sources)
    host = hw.host_link
    host_link = (Network(host.unidirectional_bytes_per_s, default_latency_s("pcie")[1], eff["host_link"])
                 if host else None)
    assumptions = assumptions_for(hw.kind)
    overrides = profile.get("perfmodel") if (applies or explicit) else None
    if isinstance(overrides, dict) and overrides:
        for k, v in overrides.items():
            if k not in assumptions:
                raise UserError(f"calibration profile: unknown perfmodel assumption {k!r}; "
                                f"known: {', '.join(assumptions)}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise UserError(f"calibration profile: perfmodel.{k} must be a non-negative number, got {v!r}")
            assumptions[k] = float(v)
        sources["assumptions"] = "calibration profile"
    return Machine(platform, ceilings, network, host_link, eff, sources, assumptions, scale_out,
                   hw.node_devices if scale_out is not None else 0)


def _scale_out(hw: HardwareSpec, devices: int, efficiency: float, sources: dict) -> Network | None:
    """The inter-node network where `devices` fill more than one reference node."""
    if hw.kind != "gpu" or not hw.node_devices or devices <= hw.node_devices:
        return None
    if hw.scale_out is None:
        sources["scale_out"] = (f"{devices} devices span nodes, but no node network is catalogued for "
                                f"{hw.name}: every device is put on its {hw.link.kind if hw.link else 'link'}")
        return None
    base, alpha = default_latency_s(hw.scale_out.kind)
    sources["scale_out"] = (f"{devices} devices on nodes of {hw.node_devices}: data-parallel groups that span "
                            f"nodes run over {hw.scale_out.kind} ({hw.scale_out.unidirectional_bytes_per_s / 1e9:g} "
                            f"GB/s per device)")
    return Network(hw.scale_out.unidirectional_bytes_per_s, alpha, efficiency, base_s=base)
