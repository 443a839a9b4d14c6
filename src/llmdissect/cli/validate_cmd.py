"""`llmdissect validate`: measured records against the estimates of the same configurations."""
from __future__ import annotations

import typer


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    pass
