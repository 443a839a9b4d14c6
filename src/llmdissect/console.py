"""Printing for every subcommand: rich tables for people, one JSON record for machines."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

# Piped output gets a wide page so tables are not cut to 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)


def print_json(data: Any) -> None:
    """Exactly one JSON document on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, allow_nan=False, default=str) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A remark for people (on stderr, so `--json` output stays clean)."""
    err_console.print(message)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          justify_numbers: bool = True) -> Table:
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, justify="right" if justify_numbers and c not in columns[:1] else "left")
    for r in rows:
        t.add_row(*(format_value(v) for v in r))
    return t


def format_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def human_bytes(n: float | None) -> str:
    """Bytes for people, in binary units (GiB appears only in human output)."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def human_count(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


def human_rate(n: float | None, unit: str) -> str:
    """`1.23 TFLOP/s`-style: decimal prefixes for rates."""
    if n is None:
        return "-"
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"
