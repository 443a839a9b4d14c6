"""How the processes we measure allocate host memory (glibc malloc's tunables).

glibc gives blocks above its mmap threshold straight to the kernel and takes them back on
free, and trims the heap's top whenever 128 KiB are free there. A training step frees and
re-allocates tens of MiB of gradients, activations and optimizer temporaries, so each step
then pays page faults whose count depends on the allocator's history: in one run here,
AdamW's out-of-place `sqrt` and `div` took 6-10x the time of its in-place ops on the same
tensors, and two identical runs of `bench pretrain` differed by 40 %. PyTorch's CPU tuning
guide advises a caching allocator (jemalloc or tcmalloc) for this reason
(pytorch.org/tutorials/recipes/recipes/tuning_guide.html, "Switch Memory allocator").
With no install, glibc's own tunables do the same: a fixed 32 MiB mmap threshold (its
64-bit maximum, DEFAULT_MMAP_THRESHOLD_MAX) and a 4 GiB trim threshold keep freed memory
for reuse (glibc manual, "Memory Allocation Tunables").

A user's own GLIBC_TUNABLES, an LD_PRELOAD allocator, or LLMDISSECT_MALLOC=default leaves
the environment as it is. Every record says which allocator setting its processes ran with.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

MMAP_THRESHOLD_BYTES = 32 * 2**20
TRIM_THRESHOLD_BYTES = 4 * 2**30
TUNABLES = (f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD_BYTES}:"
            f"glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}")
OPT_OUT_ENV = "LLMDISSECT_MALLOC"


def allocator_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to add to a measured child's environment (empty: leave it as it is)."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT_ENV, "").lower() == "default" or "GLIBC_TUNABLES" in environ \
            or "malloc" in environ.get("LD_PRELOAD", ""):
        return {}
    return {"GLIBC_TUNABLES": TUNABLES}


def allocator_setting(environ: Mapping[str, str] | None = None) -> str:
    """What a record says of its processes' allocator."""
    environ = os.environ if environ is None else environ
    preload = environ.get("LD_PRELOAD", "")
    if "malloc" in preload:
        return f"LD_PRELOAD={preload}"
    tunables = environ.get("GLIBC_TUNABLES") or allocator_env(environ).get("GLIBC_TUNABLES")
    return f"glibc GLIBC_TUNABLES={tunables}" if tunables else "glibc defaults"
