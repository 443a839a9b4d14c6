"""How a measuring command ends: store the record, print it, choose the exit code."""
from __future__ import annotations

from collections.abc import Callable

import typer

from llmdissect.console import err_console, print_json
from llmdissect.errors import EXIT_USER_ERROR, UserError
from llmdissect.results.recording import save
from llmdissect.results.schema import RunRecord


def finish(record: RunRecord, db, json_out: bool, show: Callable[[RunRecord], None],
           user_error: bool = False) -> None:
    """Save `record` (whatever its status), print it, and exit: 0 ok, 2 bad input found at
    run time, 1 for failed / oom / timeout (with one clear line on stderr)."""
    save(record, db)
    if json_out:
        print_json(record.to_dict())
    elif record.status == "ok":
        show(record)
    if record.status == "ok":
        return
    if user_error:
        raise UserError(record.error or "bad input")
    err_console.print(f"error: run {record.id} ended with status {record.status}: {record.error}", markup=False,
                      soft_wrap=True)
    raise typer.Exit(EXIT_USER_ERROR if record.status == "skipped" else 1)
