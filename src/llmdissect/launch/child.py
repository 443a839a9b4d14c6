"""Run a workload function in a fresh child process (or under torchrun for N processes).

The target is `"package.module:function"`, called with one JSON-able config dict; it
returns a JSON-able dict (rank 0's is kept). A crash, an out-of-memory or a hang becomes a
ChildResult with status `failed`, `oom` or `timeout`, never an exception in the parent.

Isolation must not change the numbers: the child's thread count is set deliberately
(`threads`, default: usable cores // processes) so that a child matches an in-process loop.
"""
from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmdissect.child_result import ChildResult
from llmdissect.measure.allocator import allocator_env
from llmdissect.specs.hardware import usable_cores

THREADS_ENV = "LLMDISSECT_THREADS"
STDERR_TAIL_CHARS = 4000


def resolve_target(target: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    module, _, name = target.partition(":")
    if not name:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    return getattr(importlib.import_module(module), name)


def run_inline(target: str, config: dict[str, Any]) -> dict[str, Any]:
    """The same function in this process (tests, debugging); exceptions propagate."""
    return resolve_target(target)(config)


def default_threads(nproc: int) -> int:
    return max(1, usable_cores() // max(1, nproc))


def _command(target: str, cfg: Path, out: Path, nproc: int, nnodes: int, node_rank: int,
             rdzv_endpoint: str | None, distributed: bool) -> list[str]:
    worker = ["-m", "llmdissect.launch.worker", target, str(cfg), str(out)]
    if nproc == 1 and nnodes == 1 and not distributed:
        return [sys.executable, *worker]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--max-restarts=0"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={rdzv_endpoint or '127.0.0.1:29500'}"]
    return cmd + worker


def _limit_memory(max_memory_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
    return apply


def run_child(target: str, config: dict[str, Any], *, nproc: int = 1, nnodes: int = 1, node_rank: int = 0,
              rdzv_endpoint: str | None = None, distributed: bool = False, timeout_s: float | None = None,
              max_memory_bytes: int | None = None, threads: int | None = None,
              env: dict[str, str] | None = None, stream_output: bool = False) -> ChildResult:
    """Run `target(config)` in a child process (`nproc` > 1 or `distributed`: torchrun).

    `max_memory_bytes` caps each process's address space (RLIMIT_AS); a run that hits it
    is reported as `oom`. `timeout_s` kills the whole process group and reports `timeout`.
    """
    threads = threads or default_threads(nproc * nnodes if nnodes > 1 else nproc)
    with tempfile.TemporaryDirectory(prefix="llmdissect-") as tmp:
        cfg, out, log = Path(tmp) / "config.json", Path(tmp) / "result.json", Path(tmp) / "output.log"
        cfg.write_text(json.dumps(config))
        child_env = {**os.environ, **allocator_env(), **(env or {}), THREADS_ENV: str(threads),
                     "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                     "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        cmd = _command(target, cfg, out, nproc, nnodes, node_rank, rdzv_endpoint, distributed)
        t0 = time.perf_counter()
        warm = _warm_exit(target, cfg, out, log, child_env, nproc=nproc, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint,
                          distributed=distributed, timeout_s=timeout_s, max_memory_bytes=max_memory_bytes,
                          stream_output=stream_output)
        if warm is not None:
            return _result(Path(tmp), out, log, warm.returncode, warm.timed_out, time.perf_counter() - t0,
                           timeout_s, max_memory_bytes)
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=None if stream_output else log_file,
                                    stderr=None if stream_output else subprocess.STDOUT, env=child_env,
                                    start_new_session=True,
                                    preexec_fn=_limit_memory(max_memory_bytes) if max_memory_bytes else None)
            timed_out = False
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                returncode = proc.wait()
            except BaseException:
                _kill_group(proc)
                proc.wait()
                raise
        return _result(Path(tmp), out, log, returncode, timed_out, time.perf_counter() - t0, timeout_s,
                       max_memory_bytes)


def _warm_exit(target: str, cfg: Path, out: Path, log: Path, child_env: dict[str, str], *, nproc: int, nnodes: int,
               rdzv_endpoint: str | None, distributed: bool, timeout_s: float | None,
               max_memory_bytes: int | None, stream_output: bool):
    """The child's exit when a warm process (`launch.warm`) ran it; None: run it the ordinary way."""
    from llmdissect.launch.warm import WarmUnavailable, active

    launcher = active()
    if launcher is None or stream_output or nnodes != 1 or rdzv_endpoint is not None \
            or not launcher.can_run(child_env):
        return None
    try:
        return launcher.run([target, str(cfg), str(out)], child_env, log, nproc=nproc, distributed=distributed,
                            timeout_s=timeout_s, max_memory_bytes=max_memory_bytes, kill_group=_kill_pid_group)
    except WarmUnavailable:
        launcher.close()
        return None


def _result(tmp: Path, out: Path, log: Path, returncode: int, timed_out: bool, wall: float,
            timeout_s: float | None, max_memory_bytes: int | None) -> ChildResult:
    tail = log.read_text(errors="replace")[-STDERR_TAIL_CHARS:] if log.exists() else ""
    rank_errors = _rank_errors(tmp)
    if timed_out:
        return ChildResult("timeout", error=f"timed out after {timeout_s:g} s", returncode=returncode,
                           wall_s=wall, output_tail=tail, rank_errors=rank_errors)
    payload = json.loads(out.read_text()) if out.exists() else None
    result = _classify(payload, returncode, wall, tail, rank_errors)
    if result.status == "failed" and max_memory_bytes and _mentions_allocation_failure(tail):
        result.status = "oom"  # e.g. OpenBLAS giving up at start-up under the address-space limit
    return result


def _mentions_allocation_failure(text: str) -> bool:
    t = text.lower()
    return "memory allocation" in t or "cannot allocate memory" in t or "can't allocate memory" in t \
        or "memoryerror" in t or "out of memory" in t


def _kill_group(proc: subprocess.Popen) -> None:
    _kill_pid_group(proc.pid)


def _kill_pid_group(pid: int) -> None:
    """Kill the child and everything below it. torchrun starts each worker in a session of
    its own, so killing the child's process group alone would leave the ranks running."""
    try:
        import psutil

        descendants = psutil.Process(pid).children(recursive=True)
    except Exception:  # psutil missing, or the child already gone
        psutil, descendants = None, []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in descendants:
        try:
            p.kill()  # psutil refuses a pid that was reused meanwhile
        except psutil.Error:
            pass


def _rank_errors(tmp: Path) -> dict[int, str]:
    errors = {}
    for f in tmp.glob("result.json.rank*"):
        data = json.loads(f.read_text())
        errors[int(f.name.rsplit("rank", 1)[1])] = data.get("error", "")
    return errors


def _classify(payload: dict | None, returncode: int, wall: float, tail: str,
              rank_errors: dict[int, str]) -> ChildResult:
    if payload is not None and payload.get("status") == "ok" and returncode == 0:
        return ChildResult("ok", result=payload.get("result"), returncode=0, wall_s=wall, output_tail=tail)
    if payload is not None and payload.get("status") in ("failed", "oom"):
        error = payload.get("error") or ""
        summary = _exit_summary(returncode, tail, spoke={0, *rank_errors})
        if "Root Cause" in tail and not summary.startswith("rank 0 "):
            error = f"{summary}; rank 0 then saw: {error[:300]}"
        return ChildResult(payload["status"], error=error, user_error=payload.get("user_error", False),
                           returncode=returncode, wall_s=wall, output_tail=tail, rank_errors=rank_errors)
    statuses = {"oom" if "out of memory" in e.lower() or "MemoryError" in e else "failed" for e in rank_errors.values()}
    if rank_errors:
        rank, msg = sorted(rank_errors.items())[0]
        status = "oom" if "oom" in statuses else "failed"
        error = f"rank {rank}: {msg}"
        summary = _exit_summary(returncode, tail, spoke=set(rank_errors))
        # a rank that died without a word (killed, os._exit) is the cause; the others' errors
        # (a connection reset by it) are what they saw next
        if "Root Cause" in tail and not any(summary.startswith(f"rank {r} ") for r in rank_errors):
            error = f"{summary}; rank {rank} then saw: {msg[:300]}"
        return ChildResult(status, error=error, returncode=returncode, wall_s=wall,
                           output_tail=tail, rank_errors=rank_errors)
    if returncode == -signal.SIGKILL or returncode == 128 + signal.SIGKILL:
        return ChildResult("oom", error="killed by SIGKILL (most likely the system's out-of-memory killer)",
                           returncode=returncode, wall_s=wall, output_tail=tail)
    killed_by = _signal_name(returncode)
    if killed_by:
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        return ChildResult("failed", error=f"killed by signal {killed_by}: {last}", returncode=returncode,
                           wall_s=wall, output_tail=tail)
    return ChildResult("failed", error=_exit_summary(returncode, tail), returncode=returncode,
                       wall_s=wall, output_tail=tail)


def _signal_name(returncode: int) -> str | None:
    """SIGSEGV for a child killed by signal 11 (-11 from Popen; 139 when a shell or a
    launcher in between reported it as 128 + 11), None for a plain exit code."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else 0
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return None


def _torchrun_failures(tail: str) -> list[tuple[str, str]]:
    """(rank, exit code) of every rank in torchrun's failure summary, its root cause first."""
    found: list[tuple[str, str]] = []
    for section in ("Root Cause", "Failures:"):
        if section not in tail:
            continue
        text = tail.split(section, 1)[1]
        if section == "Failures:":
            text = text.split("Root Cause", 1)[0]
        rank = None
        for line in text.splitlines():
            key, _, value = line.strip().partition(":")
            if key.strip() == "rank":
                rank = value.strip()
            elif key.strip() == "exitcode" and rank is not None:
                found.append((rank, value.strip()))
                rank = None
        if section == "Root Cause" and not found:
            found.append(("?", "?"))
    return found


def _exit_summary(returncode: int, tail: str, spoke: set[int] = frozenset()) -> str:
    """One line: the rank that took the run down (and its exit code) when torchrun named the
    failures, else the last line. torchrun's "root cause" is whichever failure it saw first,
    and a rank that lost its connection can exit in the same instant as the rank that died;
    so a failed rank that wrote no error of its own (`spoke` holds those that did) goes first."""
    failures = _torchrun_failures(tail)
    if failures:
        silent = [f for f in failures if _rank_number(f[0]) not in spoke]
        rank, code = (silent or failures)[0]
        words = last_words(tail)
        return f"rank {rank} died with exit code {code}; the run was stopped" + (f" ({words})" if words else "")
    last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
    return f"child exited with code {returncode}: {last}"


def _rank_number(text: str) -> int | None:
    head = text.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


# What a process that died by a signal printed last, most telling first: C++'s message
# for an uncaught exception (gloo's "Connection closed by peer"), then the abort itself.
_CRASH_MARKERS = ("what():", "terminate called", "Fatal Python error", "double free", "free():",
                  "corrupted", "Segmentation fault", "Assertion")


def last_words(tail: str) -> str:
    """The line of the output that says why a rank crashed without writing an error, or ''."""
    lines = [line.strip() for line in tail.splitlines() if "torch/distributed/elastic" not in line]
    for marker in _CRASH_MARKERS:
        found = next((line for line in lines if marker in line), None)
        if found:
            return found[:300]
    return ""
