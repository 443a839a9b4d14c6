"""The estimator's view of a measured configuration: what `run` shows in the plan (and
uses to skip points that cannot fit) and what `validate` compares measurements against.

A measured record's config (the shared keys of docs/developing.md) is turned into the
options of `perfmodel.request.estimate_request` on the machine it ran on: `cpu` (or `Nxcpu`
for N processes) with this machine's calibration profile. No torch is imported here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.perfmodel.config import ENGINE_ZERO

TRAIN_KEYS = ("model", "engine", "nproc", "zero", "offload", "recompute", "attn", "dtype", "optimizer",
              "micro_batch", "seq", "grad_accum", "tp", "pp", "method", "lora_rank", "quant")
INFER_KEYS = ("model", "batch", "input_len", "output_len", "dtype", "attn", "cache", "quant", "compile", "group_size")


@dataclass
class Prediction:
    """What the estimator says of one point (None where it has no number)."""

    fits: bool | None = None
    reason: str | None = None
    """Why it does not fit, or why there is no estimate."""
    tokens_per_s: float | None = None
    memory_bytes: float | None = None
    busbw_bytes_per_s: float | None = None
    """Collectives: the bus bandwidth the alpha-beta model predicts at the largest size."""
    estimate: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {mn.FITS: self.fits, "reason": self.reason, mn.TOKENS_PER_S: self.tokens_per_s,
                "memory_bytes": self.memory_bytes, mn.BUSBW_BYTES_PER_S: self.busbw_bytes_per_s}


def local_hardware(config: dict[str, Any]) -> str | None:
    """The estimator's name for the device a measured record ran on (None: not catalogued)."""
    hw = config.get("hardware") or config.get("device")
    if hw == "cpu":
        return "cpu"
    if hw == "cuda":  # records made before measure.devices said only `cuda`: this machine's GPU
        from llmdissect.measure.env import nvidia_smi
        from llmdissect.specs.hardware import match_gpu

        gpus = nvidia_smi()
        spec = match_gpu(gpus[0]["name"]) if gpus else None
        return spec.name if spec is not None else None
    from llmdissect.specs import get_hardware
    from llmdissect.specs.hardware import match_gpu

    try:
        return get_hardware(str(hw)).name
    except UserError:  # a driver's name, as inference records carry it
        spec = match_gpu(str(hw))
        return spec.name if spec is not None else None


def estimate_options(kind: str, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(estimate kind, estimate_request options) for a measured config; UserError when the
    estimator cannot express it."""
    hardware = local_hardware(config)
    if hardware is None:
        raise UserError(f"no hardware spec for {config.get('hardware')!r}")
    if kind in mn.TRAIN_KINDS:
        method = config.get("method", "full")
        gpus = int(config.get("nproc", 1)) * int(config.get("nnodes", 1))
        opts = {"model": config["model"], "hardware": hardware, "gpus": gpus, "dtype": config.get("dtype"),
                "micro_batch": config.get("micro_batch"), "seq": config.get("seq"),
                "grad_accum": config.get("grad_accum"), "zero": config.get("zero", 0),
                "offload": config.get("offload", "none"), "recompute": config.get("recompute", "none"),
                "attn": config.get("attn", "sdpa"), "tp": 1, "pp": 1, "optimizer": config.get("optimizer"),
                "ep": config.get("ep", 1),
                # an engine the estimator does not model (tensor-parallel runs) is left to it
                "engine": config.get("engine") if config.get("engine") in ENGINE_ZERO else None,
                "quant": config.get("quant", "none") if method != "full" else "none",
                "lora_rank": config.get("lora_rank") if method != "full" else None,
                "lora_targets": config.get("lora_targets") if method != "full" else None}
        return kind, opts
    if kind == mn.INFER:
        opts = {"model": config["model"], "hardware": hardware, "batch": config["batch"],
                "input_len": config["input_len"], "output_len": config["output_len"], "dtype": config.get("dtype"),
                "attn": config.get("attn", "sdpa"), "tp": 1, "quant": config.get("quant", "none"),
                "cache": config.get("cache") or "dynamic", "group_size": config.get("group_size") or None}
        return kind, opts
    raise UserError(f"the estimator has no model of `{kind}` runs")


def estimate_measured(kind: str, config: dict[str, Any], calibration=None):
    """The Estimate of the configuration of a measured run (raises UserError when none)."""
    from llmdissect.perfmodel.request import build_estimate

    ekind, opts = estimate_options(kind, config)
    return build_estimate(ekind, opts, calibration)


def predict_measured(kind: str, config: dict[str, Any]) -> Prediction:
    """The plan's prediction for a measured point; `fits` False means skip it."""
    try:
        est = estimate_measured(kind, config)
    except (UserError, KeyError, TypeError) as e:
        return Prediction(reason=f"no estimate: {e}")
    m = est.metrics
    total = m[mn.MEMORY][mn.TOTAL_BYTES]
    fits, reason = est.fits, None if est.fits else est.verdict()
    nproc = int(config.get("nproc", 1)) * int(config.get("nnodes", 1))
    if config.get("hardware") == "cpu" and nproc > 1:
        # the processes of a CPU run share one host memory
        cap = m["device_memory_bytes"]
        fits = total * nproc <= cap
        reason = None if fits else (f"does not fit: {nproc} processes x {total / 2**30:.2f} GiB needed, "
                                    f"{cap / 2**30:.2f} GiB of host memory")
    return Prediction(fits=fits, reason=reason, tokens_per_s=m.get(mn.TOKENS_PER_S), memory_bytes=total, estimate=est)


def predict_comm(config: dict[str, Any]) -> Prediction:
    """Predicted busbw of the first operator at the largest size (gloo on this CPU only)."""
    from llmdissect.calibration_profile import load_profile
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.perfmodel.comm import FACTORS, collective_time_s
    from llmdissect.specs import resolve_platform

    ops = [op for op in config.get("ops", []) if op in FACTORS]
    if config.get("hardware") != "cpu" or not ops:
        return Prediction(reason="no collective model for this run")
    n, size = int(config["world_size"]), float(config["max_bytes"])
    net = machine_for(resolve_platform("cpu", n), config.get("dtype", "fp32"), load_profile()).network
    factor = {"all_reduce": 2 * (n - 1) / n}.get(ops[0], (n - 1) / n)
    return Prediction(busbw_bytes_per_s=size / collective_time_s(net, ops[0], size, n) * factor)


def join_key(kind: str, config: dict[str, Any]) -> tuple | None:
    """What a measured record and an estimate of the same configuration share."""
    keys = TRAIN_KEYS if kind in mn.TRAIN_KINDS else INFER_KEYS if kind == mn.INFER else None
    if keys is None:
        return None
    return (kind, config.get("hardware"), *(config.get(k) for k in keys))
