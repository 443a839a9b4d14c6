"""The shipped set of published results: one `[[point]]` per number someone measured and
published, with its source, the quoted row, and the `estimate` options that express it.

Files: `data/<category>.toml` beside this module (docs/published.md describes every field).
A point whose configuration the model cannot express keeps `missing` (what the model lacks)
and may have no `estimate` table; it is listed, never dropped.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from llmdissect.errors import UserError

CATEGORIES = ("pretrain", "finetune", "infer", "serve")
METRICS = ("tokens_per_s_per_device", "tokens_per_s", "mfu", "hfu", "step_time_s", "peak_memory_bytes", "ttft_s",
           "tpot_s", "e2e_latency_s", "decode_tokens_per_s", "prefill_tokens_per_s", "requests_per_s")
"""What a point may report, each in the unit docs/published.md gives (fractions, seconds, bytes)."""


class PublishedPoint(BaseModel):
    """One published number and how the estimator is asked for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    category: Literal["pretrain", "finetune", "infer", "serve"]
    source: str
    where: str
    quote: str
    model: str
    hardware: str
    config: str
    metric: str
    unit: str
    value: float
    derived: str = ""
    published_value: str = ""
    notes: str = ""
    estimate: Optional[dict[str, Any]] = None
    model_config_: Optional[dict[str, Any]] = None
    missing: str = ""

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(f"unknown metric {v!r}; one of {', '.join(METRICS)}")
        return v

    @field_validator("value")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"value must be positive, got {v}")
        return v

    @field_validator("source")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("https://", "http://")):
            raise ValueError(f"source must be a URL, got {v!r}")
        return v

    @property
    def expressible(self) -> bool:
        return self.estimate is not None


def data_dir() -> Path:
    return Path(str(resources.files("llmdissect.published") / "data"))


def read_points(path: Path) -> list[PublishedPoint]:
    """The points of one file; UserError naming the file and the point on any bad field."""
    from llmdissect.specs.tomlfile import read_toml

    raw = read_toml(path).get("point")
    if not isinstance(raw, list):
        raise UserError(f"{path}: no [[point]] tables")
    points = []
    for i, entry in enumerate(raw):
        name = entry.get("id", f"point {i + 1}") if isinstance(entry, dict) else f"point {i + 1}"
        data = dict(entry)
        if "model_config" in data:  # `model_config` is pydantic's own name
            data["model_config_"] = data.pop("model_config")
        try:
            points.append(PublishedPoint(**data))
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err.get("loc", ())) or "?"
            raise UserError(f"{path}: {name}: field {field}: {err['msg']}") from None
    return points


@lru_cache(maxsize=4)
def _load(folder: str) -> tuple[PublishedPoint, ...]:
    points: list[PublishedPoint] = []
    for path in sorted(Path(folder).glob("*.toml")):
        points.extend(read_points(path))
    seen: set[str] = set()
    for p in points:
        if p.id in seen:
            raise UserError(f"{folder}: point id {p.id!r} appears twice")
        seen.add(p.id)
    return tuple(points)


def load_points(category: str | None = None, folder: Path | None = None) -> list[PublishedPoint]:
    """Every shipped point (or those of one category), in file order."""
    if category is not None and category not in CATEGORIES:
        raise UserError(f"unknown category {category!r}; choose one of {', '.join(CATEGORIES)}")
    points = _load(str(folder or data_dir()))
    return [p for p in points if category is None or p.category == category]
