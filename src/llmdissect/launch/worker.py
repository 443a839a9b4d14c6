"""The child side of `run_child`: `python -m llmdissect.launch.worker TARGET CONFIG OUT`.

Rank 0 writes `{"status": "ok", "result": ...}` to OUT; any rank that fails writes
`{"status": "failed"|"oom", "error": ...}` to OUT (rank 0) or OUT.rankN (others).
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from llmdissect.errors import UserError


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    text = str(exc).lower()
    return name == "OutOfMemoryError" or "out of memory" in text or "can't allocate memory" in text \
        or "cannot allocate memory" in text


def _write(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    tmp.replace(path)  # atomic: the parent never reads half a file


def main(argv: list[str]) -> int:
    target, cfg_path, out_path = argv
    config = json.loads(Path(cfg_path).read_text())
    rank = int(os.environ.get("RANK", "0"))
    out = Path(out_path) if rank == 0 else Path(f"{out_path}.rank{rank}")
    threads = os.environ.get("LLMDISSECT_THREADS")
    try:
        from llmdissect.quiet import quiet_libraries

        quiet_libraries()
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        from llmdissect.launch.child import resolve_target

        result = resolve_target(target)(config)
    except BaseException as exc:  # every failure becomes a record, never a lost run
        oom = is_out_of_memory(exc)
        message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, UserError) else str(exc)
        try:
            _write(out, {"status": "oom" if oom else "failed", "error": message[:2000],
                         "user_error": isinstance(exc, UserError), "traceback": traceback.format_exc()[-4000:]})
        except MemoryError:
            os.write(2, b"out of memory while reporting the failure\n")
        if not isinstance(exc, UserError):
            traceback.print_exc()
        return 3 if oom else 1
    if rank == 0:
        _write(out, {"status": "ok", "result": result})
    return 0


def exit_now(code: int) -> None:
    """End a rank of a distributed run without the interpreter's finalization: gloo's worker
    threads can still hold tensors then, and tearing them down aborts the process (SIGABRT,
    "terminate called without an active exception") about once in twenty runs, after the
    result was written. Everything worth keeping is on disk by now."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        exit_now(status)
    sys.exit(status)
