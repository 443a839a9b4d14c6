"""Model and hardware specifications, kept as data (TOML) beside this package."""
from llmdissect.specs.hardware import (
    HardwareSpec,
    Platform,
    get_hardware,
    list_hardware,
    list_platforms,
    resolve_platform,
)
from llmdissect.specs.models import ModelSpec, get_model, list_models

__all__ = [
    "ModelSpec", "get_model", "list_models",
    "HardwareSpec", "Platform", "get_hardware", "list_hardware", "list_platforms", "resolve_platform",
]
