"""Suite files: YAML read with `yaml.safe_load` rules, checked with messages that name the line.

A suite file is a mapping::

    suite: my-sweep                # name the records are stored under (default: the file's stem)
    description: what it is for
    defaults: {timeout: 600}       # merged into every entry (an entry's own keys win)
    entries:
      - kind: pretrain             # pretrain | finetune | infer | serve | ops | comm | estimate
        name: zero-sweep           # optional label, stored with each record
        model: debug-llama         # fixed options of the benchmark
        seq: 64
        timeout: 120               # run settings: timeout (s), max_memory (e.g. 2G) per point
        grid:                      # options to cross: one point per combination
          zero: [0, 2]
          recompute: [none, full]

Every point gets a stable key (a hash of its kind and options, not of its run settings);
the key is stored with its record, which is how `--resume` knows what is already done.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmdissect.errors import UserError
from llmdissect.suites.kinds import KINDS, check_options

RUN_SETTINGS = ("timeout", "max_memory")
ENTRY_KEYS = ("kind", "name", "grid", *RUN_SETTINGS)
TOP_KEYS = ("suite", "description", "defaults", "entries")
BUILTIN_DIR = Path(__file__).parent


class _Map(dict):
    """A mapping that remembers the line (1-based) of itself and of each key."""

    line: int = 0
    key_lines: dict


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings keep their lines (yaml's node marks)."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    m = _Map()
    m.line = node.start_mark.line + 1
    m.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) or key is None:
            raise UserError(f"line {key_node.start_mark.line + 1}: a key must be a plain name")
        if key in m:
            raise UserError(f"line {key_node.start_mark.line + 1}: field {key!r} given twice")
        m[key] = loader.construct_object(value_node, deep=True)
        m.key_lines[key] = key_node.start_mark.line + 1
    return m


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)


@dataclass(frozen=True)
class Point:
    """One benchmark to run: a kind, its options, and how to run it."""

    kind: str
    options: dict[str, Any]
    entry: int
    name: str | None = None
    timeout_s: float | None = None
    max_memory: str | None = None
    line: int = 0
    grid_keys: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return point_key(self.kind, self.options)

    def label(self) -> str:
        order = [*self.grid_keys, *(k for k in self.options if k not in self.grid_keys)]
        shown = " ".join(f"{k}={self.options[k]}" for k in order if k != "model" and k in self.options)
        return f"{self.kind} {self.options.get('model', '')} {shown}".replace("  ", " ").strip()


@dataclass
class Suite:
    name: str
    source: str
    description: str = ""
    points: list[Point] = field(default_factory=list)
    duplicates: int = 0


def point_key(kind: str, options: dict[str, Any]) -> str:
    """Stable identity of a point: the same kind and options give the same key, in any order."""
    text = json.dumps({"kind": kind, "options": options}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A built-in suite name or a path to a suite file."""
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if "/" not in name_or_path and not name_or_path.endswith((".yaml", ".yml")) and builtin.is_file():
        return builtin
    path = Path(name_or_path)
    if path.is_file():
        return path
    raise UserError(f"unknown suite {name_or_path!r}: not a file, and the built-in suites are "
                    f"{', '.join(['quick', *builtin_names()])}")


def load(name_or_path: str) -> Suite:
    """Read, check and expand a suite (UserError naming the line and field on any mistake)."""
    path = resolve(name_or_path)
    where = path.name
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read suite file {path}: {e}") from None
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise UserError(f"{where}: {line}not valid YAML: {getattr(e, 'problem', None) or e}") from None
    return parse(data, where, default_name=path.stem)


def parse(data: Any, where: str, default_name: str) -> Suite:
    if not isinstance(data, _Map):
        raise UserError(f"{where}: line 1: a suite file is a mapping with an `entries:` list")
    _unknown(data, TOP_KEYS, where, "")
    entries = data.get("entries")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{where}: line {data.key_lines.get('entries', data.line)}: field entries: "
                        "needs a non-empty list of benchmark entries")
    name = data.get("suite", default_name)
    if not isinstance(name, str) or not name.strip() or name == "quick":
        raise UserError(f"{where}: line {data.key_lines.get('suite', 1)}: field suite: needs a name "
                        "(other than the built-in 'quick')")
    defaults = data.get("defaults") or _Map()
    if not isinstance(defaults, _Map):
        raise UserError(f"{where}: line {data.key_lines['defaults']}: field defaults: needs a mapping")
    suite = Suite(name=name, source=where, description=str(data.get("description") or ""))
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        for point in _expand(entry, defaults, i, where, data.line):
            if point.key in seen:
                suite.duplicates += 1
                continue
            seen.add(point.key)
            suite.points.append(point)
    return suite


def _unknown(m: _Map, known: tuple[str, ...], where: str, prefix: str) -> None:
    for key in m:
        if key not in known:
            raise UserError(f"{where}: line {m.key_lines[key]}: field {prefix}{key}: unknown; "
                            f"expected one of {', '.join(known)}")


def _expand(entry: Any, defaults: _Map, i: int, where: str, line: int) -> list[Point]:
    at = f"entries[{i}]"
    if not isinstance(entry, _Map):
        raise UserError(f"{where}: {at}: each entry is a mapping with a `kind:` (near line {line})")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise UserError(f"{where}: line {entry.key_lines.get('kind', entry.line)}: field {at}.kind: "
                        f"{kind!r} is not one of {', '.join(KINDS)}")
    merged = _Map({k: v for k, v in defaults.items() if k != "grid"})
    merged.key_lines = {k: defaults.key_lines[k] for k in merged}
    merged.update(entry)
    merged.key_lines.update(entry.key_lines)
    merged.line = entry.line
    lines = dict(merged.key_lines)
    grid = merged.get("grid") or _Map()
    if not isinstance(grid, _Map):
        raise UserError(f"{where}: line {lines['grid']}: field {at}.grid: needs a mapping of option: [values]")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"{where}: line {grid.key_lines[key]}: field {at}.grid.{key}: needs a non-empty "
                            "list of values")
        if key in ENTRY_KEYS:
            raise UserError(f"{where}: line {grid.key_lines[key]}: field {at}.grid.{key}: cannot be crossed")
        lines[key] = grid.key_lines[key]
    fixed = {k: v for k, v in merged.items() if k not in ENTRY_KEYS}
    for key, value in fixed.items():
        if isinstance(value, (list, dict)):
            raise UserError(f"{where}: line {lines[key]}: field {at}.{key}: a fixed option takes one value; "
                            "put lists of values to cross under `grid:`")
        if key in grid:
            raise UserError(f"{where}: line {grid.key_lines[key]}: field {at}.grid.{key}: also given as a fixed "
                            "option; keep one")
    timeout, max_memory = _run_settings(merged, lines, at, where)
    name = merged.get("name")
    points = []
    for combo in itertools.product(*grid.values()):
        options = {**fixed, **dict(zip(grid.keys(), combo))}
        try:
            options = check_options(kind, options)
        except UserError as e:
            field_name = getattr(e, "field", None)
            line_no = lines.get(field_name, merged.line)
            label = f"{at}.{'grid.' if field_name in grid else ''}{field_name}" if field_name else at
            raise UserError(f"{where}: line {line_no}: field {label}: {e}") from None
        points.append(Point(kind, options, i, str(name) if name is not None else None, timeout, max_memory,
                            merged.line, tuple(grid)))
    return points


def _run_settings(m: _Map, lines: dict, at: str, where: str) -> tuple[float | None, str | None]:
    timeout = m.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise UserError(f"{where}: line {lines['timeout']}: field {at}.timeout: needs seconds above 0, "
                        f"got {timeout!r}")
    max_memory = m.get("max_memory")
    if max_memory is not None:
        from llmdissect.units import parse_bytes

        try:
            parse_bytes(str(max_memory), "max_memory")
        except UserError as e:
            raise UserError(f"{where}: line {lines['max_memory']}: field {at}.max_memory: {e}") from None
        max_memory = str(max_memory)
    return (float(timeout) if timeout is not None else None), max_memory
