"""The layer rules of docs/architecture.md, read from the source with `ast` (no imports run).

A module may import its own package and any layer below its own; never a layer above, and
nothing but `python -m llmdissect` imports `cli` (nor the package root, which is the public API). `perfmodel` imports
no torch. Every import counts, at module level or inside a function.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "llmdissect"

# Top first. A unit is a subpackage or a top-level module of llmdissect.
LAYERS: list[tuple[str, ...]] = [
    ("cli", "__main__"),
    ("api", "bench"),
    ("suites",),
    ("report",),
    ("analysis", "published"),
    ("workloads",),
    ("micro",),
    ("engines",),
    ("techniques", "modeling", "launch"),
    ("perfmodel",),
    ("calibration_profile",),
    ("measure",),
    ("results",),
    ("specs",),
    ("errors", "paths", "units", "dtypes", "quiet", "config", "console", "progress", "child_result", "version",
     "metric_names"),
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def _unit(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    return rel.parts[0] if len(rel.parts) > 1 else rel.parts[0]


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = ["llmdissect", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            # `from llmdissect import x` imports the submodule x when x is one
            if name == "llmdissect":
                found += [(node.lineno, f"llmdissect.{alias.name}") for alias in node.names]
    return found


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p.name != "__init__.py" or p.parent != SRC)


def test_every_unit_has_a_layer():
    units = {_unit(p) for p in _sources()}
    assert units - set(RANK) == set(), "add the new package or module to LAYERS (and docs/architecture.md)"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_imports_a_layer_above_it(path: Path):
    unit = _unit(path)
    bad = []
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[0] != "llmdissect":
            continue
        if len(parts) == 1:
            bad.append(f"line {line}: imports the package root (the public API); import the module itself")
            continue
        target = parts[1]
        if target == unit:
            continue
        if target == "cli" and unit != "__main__":  # `python -m llmdissect` is the one way in
            bad.append(f"line {line}: imports {name} (nothing imports cli)")
        elif target in RANK and RANK[target] < RANK[unit]:
            bad.append(f"line {line}: {unit} imports {name}, a layer above it")
    assert not bad, "\n".join(bad)


def test_perfmodel_imports_no_torch():
    offenders = [f"{p.relative_to(SRC)}:{line} imports {name}" for p in (SRC / "perfmodel").rglob("*.py")
                 for line, name in _imports(p) if name.split(".")[0] in ("torch", "transformers")]
    assert not offenders, offenders


def test_devices_resolve_in_one_place():
    """`measure.devices` is the one place that turns auto | cpu | cuda into a device."""
    owners = [str(p.relative_to(SRC)) for p in _sources()
              if "def resolve_device" in p.read_text() or "def local_device" in p.read_text()]
    assert owners == ["measure/devices.py"], owners
