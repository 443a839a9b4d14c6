"""Reading a TOML spec file with errors a user can act on."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

from llmdissect.errors import UserError


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UserError(f"spec file not found: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"malformed TOML in {path}: {e}") from None


def require(data: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    """A required field of the expected type, or a UserError naming file and field."""
    if key not in data:
        raise UserError(f"{path}: missing field '{key}'")
    value = data[key]
    if isinstance(value, bool) and kind is not bool:
        raise UserError(f"{path}: field '{key}' must be {_names(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise UserError(f"{path}: field '{key}' must be {_names(kind)}, got {value!r}")
    return value


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)
