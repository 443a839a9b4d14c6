"""A serving run as a stored record: whatever happens, a record comes out."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.measure.env import capture_env
from llmdissect.results.schema import RunRecord
from llmdissect.workloads.serve.loadgen import run_async
from llmdissect.workloads.serve.serve_config import ServeConfig


def serve_record(cfg: ServeConfig, api_key: str | None = None,
                 on_done: Callable[[int, int], None] | None = None) -> tuple[RunRecord, bool]:
    """Run `cfg` and return (record, bad_input). Status ok when every request completed;
    failed (with the counts and the first error) otherwise, or when the run could not start."""
    record = RunRecord(kind=mn.SERVE, source="measured", config=cfg.to_config(), env=capture_env())
    record.env.pop("command", None)  # may hold --api-key; the key is never stored
    try:
        outcome = asyncio.run(run_async(cfg, api_key=api_key, on_done=on_done))
    except UserError as e:
        return record.finish("failed", str(e)), True
    except Exception as e:  # a bug must still leave a record
        return record.finish("failed", f"{type(e).__name__}: {e}"), False
    record.config.update(outcome.config_extra)
    record.env["server"] = outcome.server
    record.metrics = outcome.metrics
    m = outcome.metrics
    if m["failed"]:
        first = m["errors"][0] if m["errors"] else "unknown error"
        return record.finish("failed", f"{m['failed']} of {m['failed'] + m['completed']} requests failed; "
                                       f"first: {first}"), False
    return record.finish("ok"), False


class ProgressBar:
    """Requests done, on stderr, redrawn at most 4 times a second (cheap for the client)."""

    def __init__(self, title: str, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from llmdissect.console import err_console

        self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("requests"), TimeElapsedColumn(), console=err_console,
                           auto_refresh=False, transient=True)
        self._task = self._p.add_task(title, total=total)
        self._last = 0.0

    def __enter__(self) -> ProgressBar:
        self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._p.refresh()
        self._p.stop()

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last >= 0.25 or done == total:
            self._last = now
            self._p.update(self._task, completed=done, total=total)
            self._p.refresh()
