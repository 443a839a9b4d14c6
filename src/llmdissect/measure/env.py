"""The environment a record was measured in: versions, machine, project revision, command.

`capture_env()` imports no torch (estimates stay fast); `capture_device_env()` adds what
only torch can tell (GPU names, CUDA runtime) for measured runs.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from llmdissect.measure.allocator import allocator_setting
from llmdissect.specs.hardware import cpu_model_name, total_memory_bytes, usable_cores
from llmdissect.version import __version__

LIBRARIES = ("torch", "transformers", "tokenizers", "accelerate", "peft", "bitsandbytes", "torchao",
             "deepspeed", "numpy", "vllm", "llama_cpp_python")


def library_versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The project's git revision (with `-dirty` when the tree has changes), if it is a checkout."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("-dirty" if dirty else "")) or None


@lru_cache(maxsize=1)
def nvidia_smi() -> list[dict[str, str]]:
    """GPU names and driver from nvidia-smi, where it exists (no NVML binding needed)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return gpus


def capture_env() -> dict[str, Any]:
    """What every record carries. Cheap, and imports no torch."""
    return {
        "llmdissect": __version__,
        "git_revision": git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_model": cpu_model_name(),
        "cpu_cores": usable_cores(),
        "cpu_count_logical": os.cpu_count(),
        "memory_bytes": total_memory_bytes(),
        "libraries": library_versions(),
        "gpus": nvidia_smi(),
        "malloc": allocator_setting(),
        # how the measured process began: forked from a warm process that had imported torch
        # (launch/warm.py, the suites), or a fresh interpreter
        "launch": "forked from a warm process" if os.environ.get("LLMDISSECT_LAUNCH") == "warm" else "fresh process",
        "command": " ".join(sys.argv),
    }


def capture_device_env() -> dict[str, Any]:
    """`capture_env()` plus torch's view of the devices (imports torch)."""
    import torch

    env = capture_env()
    env["torch_threads"] = torch.get_num_threads()
    env["cuda_available"] = torch.cuda.is_available()
    env["cuda_version"] = torch.version.cuda
    if torch.cuda.is_available():
        env["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return env
