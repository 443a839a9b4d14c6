"""What a report is made of: sections holding findings (sentences), plots and tables."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmdissect.report.plots import Plot


@dataclass
class Table:
    title: str
    columns: Sequence[str]
    rows: list[Sequence[Any]]
    """Cells are plain values; formatting happens in `cell()` so HTML and Markdown agree."""


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    findings: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def cell(value: Any) -> str:
    """One table cell as text (no markup: the templates escape it)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if 1e3 <= abs(value) < 1e7:
            return f"{value:.0f}"
        if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


def pct(x: float) -> str:
    """A relative change as a signed percentage: 0.21 -> '+21 %'."""
    return f"{x * 100:+.0f} %" if abs(x) >= 0.01 else f"{x * 100:+.1f} %"


def mib(n: float | None) -> float | None:
    return None if n is None else n / 2**20


def ms(s: float | None) -> float | None:
    return None if s is None else s * 1e3
