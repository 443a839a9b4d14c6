"""Data-type names used across the tool, their sizes, and (lazily) their torch types."""
from __future__ import annotations

from llmdissect.errors import UserError

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1,
                                 "nf4": 0.5, "int4": 0.5}
COMPUTE_DTYPES = ("fp32", "bf16", "fp16")


def dtype_bytes(name: str) -> float:
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise UserError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}") from None


def check_compute_dtype(name: str) -> str:
    if name not in COMPUTE_DTYPES:
        raise UserError(f"unsupported compute dtype {name!r}; choose one of {', '.join(COMPUTE_DTYPES)}")
    return name


def torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[check_compute_dtype(name)]


# CPU instruction-set flags that give a dtype native matrix-product support.
_NATIVE_CPU_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_dtype_note(name: str, device: str) -> str | None:
    """The warning printed when a half-precision run is asked for on a CPU that has no
    native support for it (there such matrix products run about 100x slower than fp32)."""
    if device != "cpu" or name not in _NATIVE_CPU_FLAGS:
        return None
    if cpu_flags() & set(_NATIVE_CPU_FLAGS[name]):
        return f"{name} on this CPU uses its native {name} instructions; the default on CPU is still fp32"
    return (f"{name} matrix products run about 100x slower than fp32 on CPUs without native {name} "
            "support (no AVX-512/AMX for it); the default on CPU is fp32")
