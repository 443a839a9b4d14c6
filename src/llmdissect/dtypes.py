"""Data-type names used across the tool, their sizes, and (lazily) their torch types."""
from __future__ import annotations

from llmdissect.errors import UserError

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "nf4": 0.5, "int4": 0.5}
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


def cpu_dtype_note(name: str, device: str) -> str | None:
    """The warning printed when a half-precision run is asked for on a CPU."""
    if device == "cpu" and name in ("bf16", "fp16"):
        return (f"{name} matrix products run about 100x slower than fp32 on CPUs without AVX-512/AMX; "
                "the default on CPU is fp32")
    return None
