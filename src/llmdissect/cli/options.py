"""Options shared by many subcommands, declared once."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import typer

JsonOpt = typer.Option(False, "--json", help="Print exactly one JSON document on stdout and nothing else there.")
DbOpt = typer.Option(None, "--db", help="Results database (default: $LLMDISSECT_DB or .llmdissect/results.db).",
                     show_default=False)

DbPath = Optional[Path]


def config_options(args: dict[str, Any], run_args: Iterable[str]) -> dict[str, Any]:
    """A command's arguments (its `locals()`) as the keywords of its config, by name: the
    arguments in `run_args` (how to run, where to store) left out, and `compile_` (the
    Python name of --compile) spelled `compile`. Nothing is copied by position."""
    skip = set(run_args)
    return {("compile" if k == "compile_" else k): v for k, v in args.items() if k not in skip}
