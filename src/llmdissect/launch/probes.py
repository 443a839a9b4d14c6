"""Small targets that exercise the launcher itself (used by its tests and by `run quick`
to check that child processes and torchrun work on this machine)."""
from __future__ import annotations

import os
import time
from typing import Any


def echo(config: dict[str, Any]) -> dict[str, Any]:
    """Returns its config, the process's thread setting, rank, allocator tunables and parent
    (the warm process, when one forked it)."""
    import torch

    return {"config": config, "threads": torch.get_num_threads(), "rank": int(os.environ.get("RANK", "0")),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")), "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
            "ppid": os.getppid(), "session": os.getsid(0) == os.getpid(), "env_probe": os.environ.get("PROBE_VAR")}


def sleep(config: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(config.get("seconds", 60)))
    return {}


def allocate(config: dict[str, Any]) -> dict[str, Any]:
    """Allocate `bytes` of tensor memory (to provoke an out-of-memory under a limit)."""
    import torch

    x = torch.ones(int(config["bytes"]) // 4, dtype=torch.float32)
    return {"allocated": x.numel() * 4}


def die_by_signal(config: dict[str, Any]) -> dict[str, Any]:
    """Kill this process with `signal` (SIGKILL as the out-of-memory killer sends it, SIGSEGV
    as a crash in native code would), after a line of output."""
    import signal

    print("about to die", flush=True)
    os.kill(os.getpid(), getattr(signal, config["signal"]))
    time.sleep(30)  # not reached
    return {}


def fail(config: dict[str, Any]) -> dict[str, Any]:
    if config.get("user_error"):
        from llmdissect.errors import UserError

        raise UserError(config.get("message", "bad input"))
    raise RuntimeError(config.get("message", "probe failure"))


def all_reduce(config: dict[str, Any]) -> dict[str, Any]:
    """Each rank contributes rank + 1; every rank must see the sum (gloo)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        if config.get("die_rank") == rank:
            os._exit(17)
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        if t.item() != expected:
            raise RuntimeError(f"all_reduce gave {t.item()}, expected {expected}")
        return {"sum": t.item(), "world_size": world}
    finally:
        dist.destroy_process_group()
