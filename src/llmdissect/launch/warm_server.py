"""The warm process behind `launch.warm`: imports torch and transformers once, then forks a
fresh child for each request, so that a suite's children skip the 3-4 s of imports each.

Protocol (JSON lines): the parent writes a request `{"argv": [...], "env": {...}, "log": PATH,
"max_memory_bytes": N|null, "ranks": [{...}, ...]}` to stdin; this process answers
`{"pids": [...]}` once the children are forked, then `{"returncodes": [...], "first_failed": i}`
once they have all exited (negative: killed by that signal, as `subprocess` reports it). One request at a
time. A child is in a session of its own (the parent kills its group on a timeout), with the
request's environment, output into the log file and its address-space limit, and then runs
`launch.worker.main` exactly as `python -m llmdissect.launch.worker` would.

With several ranks, one that fails takes the others down as torchrun does (SIGTERM, then
SIGKILL after a grace period), so that a rank waiting on a dead peer cannot hang the suite.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

PRELOAD = ("torch", "transformers", "transformers.models.llama.modeling_llama", "llmdissect.launch.worker",
           "llmdissect.quiet")
"""What every measured child imports first; nothing here runs a torch operator (the
OpenMP pool must not exist before the fork)."""
PEER_GRACE_S = 5.0


def _child(argv: list[str], env: dict[str, str], log: str, max_memory_bytes: int | None) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        os.setsid()
        if max_memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own descriptors
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["llmdissect.launch.worker", *argv]
        from llmdissect.launch import worker

        code = worker.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - report and leave with a failure code
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _wait_all(pids: list[int]) -> tuple[list[int], int | None]:
    """Every child's exit code, and the index of the first that failed (None: none did)."""
    codes: dict[int, int] = {}
    first: int | None = None
    killed_at: float | None = None
    while len(codes) < len(pids):
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if killed_at is not None and time.monotonic() - killed_at > PEER_GRACE_S:
                _signal_all([p for p in pids if p not in codes], signal.SIGKILL)
            time.sleep(0.01)
            continue
        if pid not in pids:
            continue
        codes[pid] = os.waitstatus_to_exitcode(status)
        if codes[pid] != 0 and first is None:
            first = pids.index(pid)
        if codes[pid] != 0 and killed_at is None and len(pids) > 1:
            killed_at = time.monotonic()
            _signal_all([p for p in pids if p not in codes], signal.SIGTERM)
    return [codes[p] for p in pids], first


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.killpg(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def serve(preload: tuple[str, ...] = PRELOAD) -> None:
    import importlib

    loaded = []
    for name in preload:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception:  # noqa: BLE001 - a child imports what it lacks itself
            pass
    from llmdissect.quiet import quiet_libraries

    quiet_libraries()
    out = sys.stdout
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a forked child could not use CUDA
        out.write(json.dumps({"ready": False, "why": "CUDA was initialised by an import"}) + "\n")
        out.flush()
        return
    out.write(json.dumps({"ready": True, "preloaded": loaded}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        pids = []
        for rank_env in req.get("ranks") or [{}]:
            pid = os.fork()
            if pid == 0:
                _child(req["argv"], {**req["env"], **rank_env}, req["log"], req.get("max_memory_bytes"))
            pids.append(pid)
        out.write(json.dumps({"pids": pids}) + "\n")
        out.flush()
        codes, first = _wait_all(pids)
        out.write(json.dumps({"returncodes": codes, "first_failed": first}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
