"""Typed run configs (pydantic) and the one-line errors a user sees when one is invalid."""
from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from llmdissect.errors import UserError

T = TypeVar("T", bound=BaseModel)


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def parse_config(cls: type[T], **values: Any) -> T:
    """`cls(**values)`, with pydantic's first complaint turned into one line naming the option."""
    try:
        return cls(**values)
    except ValidationError as e:
        err = e.errors()[0]
        where = option_name(str(err["loc"][0])) if err.get("loc") else cls.__name__
        got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
        raise UserError(f"{where}: {err['msg']}{got}") from None
