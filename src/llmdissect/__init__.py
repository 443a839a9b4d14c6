"""llm-dissect: measure, dissect and predict the runtime performance of LLMs.

The Python API (see README.md, "Python API"), loaded on first use so that `import llmdissect`
stays light (no torch, pandas or typer):

- `llmdissect.estimate(kind, model=..., hardware=..., ...)`: an estimate's RunRecord (`api.py`);
- `llmdissect.bench.pretrain|finetune|infer|serve(...)`: measured runs' RunRecords (`bench.py`);
- `llmdissect.results.load(db, kind=...)`: stored records as a pandas DataFrame.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_FUNCTIONS = {"estimate": "llmdissect.api"}
_MODULES = ("bench", "results")


def load_results(*args: Any, **kwargs: Any):
    """Records of a results store as a pandas DataFrame; the same as `llmdissect.results.load`."""
    from llmdissect.results.frame import load_results as _load

    return _load(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """`llmdissect.estimate`, `llmdissect.bench` and `llmdissect.results`, imported when first used."""
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(_FUNCTIONS[name]), name)
    if name in _MODULES:
        return importlib.import_module(f"llmdissect.{name}")
    raise AttributeError(f"module 'llmdissect' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FUNCTIONS) | set(_MODULES))


__all__ = ["__version__", "estimate", "bench", "results", "load_results"]
