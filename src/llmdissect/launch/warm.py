"""Children forked from a warm process: a suite's many short children skip the imports.

A quick-suite point spends 3-4 s of its ~5 s importing torch and transformers in a fresh
process. Inside `with warm_children():`, `run_child` sends each single-host child to one
long-lived process (`launch.warm_server`) that imported them once and forks a fresh child
per request, and several ranks in place of torchrun. Each child is still a process of its
own, with the same environment, thread count, session, address-space limit and output as
a `subprocess` child; only the imports are shared (copy-on-write), and no torch operator
has run before the fork. `LLMDISSECT_WARM=0` turns it off.

Anything the warm process cannot do the same way (streamed output, several nodes, another
allocator setting than it started with) goes the ordinary way; so does every child if the
warm process failed to start or died.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from llmdissect.measure.allocator import allocator_env

OPT_OUT_ENV = "LLMDISSECT_WARM"
LAUNCH_ENV = "LLMDISSECT_LAUNCH"
"""Set while a warm process starts the children, so that a record's `env.launch` says how
its process began (`measure.env` reads it, on either side of the fork)."""
READY_TIMEOUT_S = 180.0

_active: WarmLauncher | None = None


@dataclass
class WarmExit:
    returncode: int
    timed_out: bool
    pids: list[int]


class WarmUnavailable(RuntimeError):
    """The warm process is gone; the caller runs the child the ordinary way."""


class WarmLauncher:
    def __init__(self, threads: int) -> None:
        self.env = {**os.environ, **allocator_env(), "OMP_NUM_THREADS": str(threads),
                    "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.failed = False
        self.preloaded: list[str] = []

    def start(self) -> None:
        """Started at the first child, not before: its imports would take a core from a
        measurement running meanwhile."""
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-m", "llmdissect.launch.warm_server"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True, text=True)

    def _read(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next line from the warm process; None on a timeout; WarmUnavailable if it died."""
        out: IO[str] = self.proc.stdout  # type: ignore[union-attr,assignment]
        if timeout_s is not None:
            ready, _, _ = select.select([out], [], [], max(0.0, timeout_s))
            if not ready:
                return None
        line = out.readline()
        if not line:
            raise WarmUnavailable("the warm process exited")
        return json.loads(line)

    def wait_ready(self) -> bool:
        if not self.ready and not self.failed:
            self.start()
            try:
                msg = self._read(READY_TIMEOUT_S)
            except (WarmUnavailable, ValueError):
                msg = None
            self.ready = bool(msg and msg.get("ready"))
            self.preloaded = list(msg.get("preloaded", [])) if msg else []
            if not self.ready:
                self.close()
        return self.ready

    def can_run(self, child_env: dict[str, str]) -> bool:
        """Variables that a process reads only at its start must match the warm process's."""
        alive = not self.failed and (self.proc is None or self.proc.poll() is None)
        return alive and all(child_env.get(k) == self.env.get(k)
                             for k in ("GLIBC_TUNABLES", "LD_PRELOAD", "PYTHONHASHSEED"))

    def run(self, argv: list[str], env: dict[str, str], log: Path, *, nproc: int, distributed: bool,
            timeout_s: float | None, max_memory_bytes: int | None, kill_group) -> WarmExit:
        if not self.wait_ready():
            raise WarmUnavailable("the warm process did not start")
        ranks = _rank_envs(nproc) if nproc > 1 or distributed else [{}]
        request = {"argv": argv, "env": env, "log": str(log), "max_memory_bytes": max_memory_bytes, "ranks": ranks}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            pids = self._read(30.0)
        except (BrokenPipeError, OSError) as e:
            raise WarmUnavailable(str(e)) from None
        if pids is None:
            self.close()
            raise WarmUnavailable("the warm process did not fork")
        pids = pids["pids"]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        timed_out = False
        try:
            done = self._read(None if deadline is None else deadline - time.monotonic())
            if done is None:
                timed_out = True
                for pid in pids:
                    kill_group(pid)
                done = self._read(60.0)
        except BaseException:
            for pid in pids:
                kill_group(pid)
            raise
        if done is None:
            self.close()
            raise WarmUnavailable("the warm process did not reap its children")
        codes, first = done["returncodes"], done.get("first_failed")
        if first is not None and len(codes) > 1 and not timed_out:
            with open(log, "a") as f:  # torchrun's summary, which `launch.child` reads the cause from
                others = "".join(f"  rank      : {r}\n  exitcode  : {c}\n"
                                 for r, c in enumerate(codes) if c != 0 and r != first)
                others = others or "  <NO_OTHER_FAILURES>\n"
                f.write(f"\nFailures:\n{others}"
                        f"Root Cause (first observed failure):\n  rank      : {first}\n"
                        f"  exitcode  : {codes[first]}\n")
        return WarmExit(returncode=0 if first is None else codes[first], timed_out=timed_out, pids=pids)

    def close(self) -> None:
        """Also what a failure calls: every later child then goes the ordinary way."""
        self.failed = True
        if _active is self:
            _label(self)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _rank_envs(nproc: int) -> list[dict[str, str]]:
    """What torchrun's standalone mode gives each worker (torch.distributed.run docs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nproc),
              "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default",
              "ROLE_WORLD_SIZE": str(nproc)}
    return [{**common, "RANK": str(r), "LOCAL_RANK": str(r), "ROLE_RANK": str(r)} for r in range(nproc)]


def active() -> WarmLauncher | None:
    return _active


@contextlib.contextmanager
def using(launcher: WarmLauncher | None) -> Iterator[WarmLauncher | None]:
    """`run_child` inside this block uses `launcher` (None: the ordinary way)."""
    global _active
    before, _active = _active, launcher
    label_before = os.environ.get(LAUNCH_ENV)
    _label(launcher)
    try:
        yield launcher
    finally:
        _active = before
        if label_before is None:
            os.environ.pop(LAUNCH_ENV, None)
        else:
            os.environ[LAUNCH_ENV] = label_before


def _label(launcher: WarmLauncher | None) -> None:
    if launcher is None or launcher.failed:
        os.environ.pop(LAUNCH_ENV, None)
    else:
        os.environ[LAUNCH_ENV] = "warm"


def enabled() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").lower() not in ("0", "no", "false", "off") and hasattr(os, "fork")


@contextlib.contextmanager
def warm_children(threads: int | None = None) -> Iterator[WarmLauncher | None]:
    """Children started by `run_child` inside this block are forked from one warm process,
    started by the first of them."""
    if not enabled() or _active is not None:
        yield _active
        return
    from llmdissect.launch.child import default_threads

    launcher = WarmLauncher(threads or default_threads(1))
    try:
        with using(launcher):
            yield launcher
    finally:
        launcher.close()
