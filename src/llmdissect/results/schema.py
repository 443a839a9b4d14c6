"""The one record schema shared by measured runs and estimates (see docs/metrics.md)."""
from __future__ import annotations

import json
import math
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from llmdissect.errors import UserError
from llmdissect.metric_names import KINDS  # the record kinds, defined once
from llmdissect.version import __version__

SOURCES = ("measured", "estimated")
STATUSES = ("ok", "failed", "oom", "timeout", "skipped")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def new_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class RunRecord:
    """One run (or estimate): what was asked, where, what came out, and how it ended."""

    kind: str
    source: str = "measured"
    status: str = "ok"
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    started_at: str = field(default_factory=utc_now)
    finished_at: str | None = None
    version: str = __version__
    id: str = field(default_factory=new_id)
    suite: str | None = None
    """Name of the suite this record belongs to, if any (not part of the config)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def finish(self, status: str | None = None, error: str | None = None) -> RunRecord:
        if status is not None:
            if status not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
            self.status = status
        if error is not None:
            self.error = error
        self.finished_at = utc_now()
        return self

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        try:
            return cls(**known)
        except (TypeError, ValueError) as e:
            raise UserError(f"not a valid run record: {e}") from None


def _jsonable(value: Any) -> Any:
    """Plain JSON types; non-finite floats become None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    if hasattr(value, "item"):  # numpy / torch scalars
        return _jsonable(value.item())
    return str(value)
