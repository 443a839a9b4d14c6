"""A rich progress bar on stderr for work done in a child process.

The child writes `{"done", "total", "current"}` to `config["progress_path"]` (`report`);
the parent runs the child in this thread (so Ctrl-C still stops it) while a second thread
moves the bar after that file (`run_with_progress`).
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def report(config: dict[str, Any], done: int, total: int, current: str) -> None:
    """Child side: record progress (atomically) where the parent looks for it."""
    path = config.get("progress_path")
    if not path or int(os.environ.get("RANK", "0")) != 0:  # one writer: the ranks of a run share the file
        return
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps({"done": done, "total": total, "current": current}))
    tmp.replace(path)


def run_with_progress(launch: Callable[[dict[str, Any]], Any], config: dict[str, Any], label: str,
                      show: bool = True) -> Any:
    """`launch(config_with_progress_path)`, with a transient bar on stderr when `show`."""
    with tempfile.TemporaryDirectory(prefix="llmdissect-progress-") as tmp:
        path = Path(tmp) / "progress.json"
        config = {**config, "progress_path": str(path)}
        if not show:
            return launch(config)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from llmdissect.console import err_console

        stop = threading.Event()
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err_console, transient=True) as bar:
            task = bar.add_task(f"{label}: starting", total=None)

            def follow() -> None:
                while not stop.wait(0.2):
                    try:
                        state = json.loads(path.read_text())
                    except (OSError, ValueError):
                        continue
                    bar.update(task, total=state["total"], completed=state["done"],
                               description=f"{label}: {state['current']}")

            thread = threading.Thread(target=follow, daemon=True)
            thread.start()
            try:
                return launch(config)
            finally:
                stop.set()
                thread.join()
