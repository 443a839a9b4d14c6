"""Sizes as people write them: `512M`, `4G`, `1.5GiB` (binary units, 1K = 1024 bytes)."""
from __future__ import annotations

import re

from llmdissect.errors import UserError

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
          "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4, "tb": 1024**4, "tib": 1024**4}


def parse_bytes(text: str, option: str = "size") -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise UserError(f"bad {option} {text!r}: use a number of bytes with an optional K, M, G or T (e.g. 4G)")
    size = int(float(m.group(1)) * _UNITS[unit])
    if size < 1:
        raise UserError(f"bad {option} {text!r}: must be at least 1 byte")
    return size
