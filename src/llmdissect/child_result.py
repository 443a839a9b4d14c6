"""What a run in a child process came back with: the launcher makes it, records read it.

At the bottom of the package so that `results` can turn one into a record without knowing
how runs are launched (`launch` makes them, `results.recording` reads them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChildResult:
    status: str
    """ok | failed | oom | timeout"""
    result: dict[str, Any] | None = None
    error: str | None = None
    user_error: bool = False
    """The child raised UserError: bad input only found at run time (exit 2 material)."""
    returncode: int | None = None
    wall_s: float = 0.0
    output_tail: str = ""
    rank_errors: dict[int, str] = field(default_factory=dict)
