"""Options shared by many subcommands, declared once."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

JsonOpt = typer.Option(False, "--json", help="Print exactly one JSON document on stdout and nothing else there.")
DbOpt = typer.Option(None, "--db", help="Results database (default: $LLMDISSECT_DB or .llmdissect/results.db).",
                     show_default=False)

DbPath = Optional[Path]
