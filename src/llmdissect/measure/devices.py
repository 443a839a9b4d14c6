"""Which device a measured run uses, and what its record calls it: resolved in one place.

`auto` means a CUDA GPU where nvidia-smi lists one (asked without importing torch, so a
parent process stays light), else the CPU. Records of every kind name the device the same
way: `cpu`, or the GPU's name as its driver reports it (`NVIDIA H100 80GB HBM3`), which
`specs.hardware.match_gpu` maps to a catalogued spec.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from llmdissect.errors import UserError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class LocalDevice:
    torch_device: str
    """`cpu` or `cuda` (the first visible GPU)."""
    hardware: str
    """The record's name for it: `cpu`, or the GPU's driver name."""


@cache
def _first_gpu_name() -> str | None:
    from llmdissect.measure.env import nvidia_smi

    gpus = nvidia_smi()
    return gpus[0]["name"] if gpus else None


def resolve_device(requested: str, option: str = "--device") -> LocalDevice:
    """The device `requested` (auto | cpu | cuda) means on this machine; UserError otherwise."""
    if requested not in DEVICE_CHOICES:
        raise UserError(f"{option} must be auto, cpu or cuda, got {requested!r}")
    if requested == "cpu":
        return LocalDevice("cpu", "cpu")
    gpu = _first_gpu_name()
    if gpu is None:
        if requested == "cuda":
            raise UserError(f"{option} cuda asked for, but no NVIDIA GPU is visible on this machine")
        return LocalDevice("cpu", "cpu")
    return LocalDevice("cuda", gpu)


def hardware_name(torch_device: str) -> str:
    """The record's name for an already resolved torch device (`cpu`, `cuda`, `cuda:1`)."""
    return "cpu" if torch_device == "cpu" else (_first_gpu_name() or "cuda")
