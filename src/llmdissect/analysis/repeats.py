"""Repeats of one configuration on one machine folded into one point.

A nightly suite, `--repeat` or several stores merged give many records of the same
configuration. Reports and `validate` show each configuration once: a `PointRecord` that
carries the latest run's config and env, metrics that are the median across its runs, and
the list of its runs (id, start, git revision, headline value) for counts, intervals and
history. Records are folded as they stream from the store, so memory grows with the number
of points and a few numbers per run, not with the records' samples; read light (without the
per-row tables, results.query.BULKY_METRICS) and `restore`d, only the latest run of each point
is parsed whole.

Estimates fold the same way (an estimate repeated per run is one). Point key: kind,
source, the machine (`machine_label`), and the config without the fields that say how a
run was repeated rather than what it was (`RUN_ONLY`).
Aggregation across runs (docs/metrics.md, "Repeated points"): a scalar metric and the
median, mean and percentiles of a Stats metric are the median over runs; min is the
smallest, max the largest, n the sum; a Stats metric's `samples` become the runs' medians
(so the bootstrap interval of a point is the interval across repeats); anything else
(rows, nested tables) is the latest run's.
"""
from __future__ import annotations

import json
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llmdissect.analysis.compare import HEADLINES, bootstrap_ci, median_of
from llmdissect.results.schema import RunRecord

RUN_ONLY = {"seed", "steps", "warmup", "repeats", "timeout_s", "base_url"}
MEDIAN_FIELDS = ("median", "mean", "p5", "p90", "p95", "p99", "stdev")


def machine_label(env: dict[str, Any]) -> str:
    """`2 x AMD EPYC (CPU)` or `8 x NVIDIA A800` for labels, findings and point keys."""
    gpus = env.get("gpus") or []
    if gpus:
        names = Counter(g.get("name", "GPU") for g in gpus)
        return ", ".join(f"{n} x {name}" for name, n in names.items())
    cores = env.get("cpu_cores")
    return f"{cores} x {env.get('cpu_model') or 'CPU'} cores" if cores else (env.get("cpu_model") or "unknown machine")


def point_key(r: RunRecord) -> tuple[str, str, str, str]:
    config = {k: v for k, v in r.config.items() if k not in RUN_ONLY}
    return (r.kind, r.source, machine_label(r.env), json.dumps(config, sort_keys=True, default=str))


def headline(kind: str) -> tuple[str, bool] | None:
    """(metric, larger is better) a point's trend and verdict follow (analysis.compare.HEADLINES)."""
    return HEADLINES[kind][0] if kind in HEADLINES else None


@dataclass(frozen=True)
class Run:
    """What a point keeps of each of its runs."""

    id: str
    started_at: str
    revision: str | None
    value: float | None
    """The run's headline metric (median of its samples), None when it has none."""


@dataclass
class PointRecord(RunRecord):
    """One configuration on one machine: the latest run's record with metrics folded over runs."""

    runs: list[Run] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.runs) or 1

    def values(self) -> list[float]:
        return [r.value for r in self.runs if r.value is not None]

    def interval(self) -> tuple[float, float] | None:
        """Bootstrap 95 % interval of the median headline value across runs (two runs or more)."""
        values = self.values()
        return bootstrap_ci(values) if len(values) > 1 else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Point:
    """Accumulates the runs of one point: the latest record whole, per-metric numbers compactly."""

    def __init__(self) -> None:
        self.latest: RunRecord | None = None
        self.runs: list[Run] = []
        self.scalars: dict[str, array] = {}
        self.fields: dict[tuple[str, str], array] = {}
        self.mins: dict[str, float] = {}
        self.maxs: dict[str, float] = {}
        self.ns: dict[str, float] = {}

    def add(self, r: RunRecord, metric: str | None) -> None:
        if self.latest is None or r.started_at >= self.latest.started_at:
            self.latest = r
        self.runs.append(Run(r.id, r.started_at, r.env.get("git_revision"),
                             median_of(r.metrics, metric) if metric else None))
        for key, v in r.metrics.items():
            if _number(v):
                self.scalars.setdefault(key, array("d")).append(float(v))
            elif isinstance(v, dict) and _number(v.get("median")):
                for f in MEDIAN_FIELDS:
                    if _number(v.get(f)):
                        self.fields.setdefault((key, f), array("d")).append(float(v[f]))
                if _number(v.get("min")):
                    self.mins[key] = min(self.mins.get(key, float("inf")), float(v["min"]))
                if _number(v.get("max")):
                    self.maxs[key] = max(self.maxs.get(key, float("-inf")), float(v["max"]))
                self.ns[key] = self.ns.get(key, 0) + (v.get("n") or 0)

    def record(self) -> PointRecord:
        r = self.latest
        assert r is not None
        runs = sorted(self.runs, key=lambda x: x.started_at)
        metrics = dict(r.metrics)
        if len(runs) > 1:
            for key, values in self.scalars.items():
                if _number(metrics.get(key)):
                    metrics[key] = statistics.median(values)
            for key in {k for k, _ in self.fields}:
                if not isinstance(metrics.get(key), dict):
                    continue
                stats = dict(metrics[key])
                for f in MEDIAN_FIELDS:
                    if (key, f) in self.fields:
                        stats[f] = statistics.median(self.fields[(key, f)])
                stats.update({k: d[key] for k, d in (("min", self.mins), ("max", self.maxs), ("n", self.ns))
                              if key in d})
                if (key, "median") in self.fields:
                    stats["samples"] = list(self.fields[(key, "median")])
                metrics[key] = stats
        return PointRecord(kind=r.kind, source=r.source, status=r.status, config=r.config, env=r.env,
                           metrics=metrics, error=r.error, started_at=r.started_at, finished_at=r.finished_at,
                           version=r.version, id=r.id, suite=r.suite, runs=runs)


class PointFolder:
    """Folds records as they come: ok records (runs and estimates) into points; a record that did
    not end ok is kept as is (each failure is listed with its error)."""

    def __init__(self) -> None:
        self._points: dict[tuple, _Point] = {}
        self.others: list[RunRecord] = []

    def add(self, r: RunRecord) -> None:
        if r.status != "ok":
            self.others.append(r)
            return
        h = headline(r.kind)
        self._points.setdefault(point_key(r), _Point()).add(r, h[0] if h else None)

    def restore(self, store: Any) -> None:
        """Put back the whole records (`store.query(ids=...)`) of what was folded from light ones
        (`iter_query(light=True)`): each point's latest run and the records kept as they are."""
        wanted = [p.latest.id for p in self._points.values() if p.latest is not None] + [r.id for r in self.others]
        whole: dict[str, RunRecord] = {}
        for start in range(0, len(wanted), 500):
            whole.update((r.id, r) for r in store.query(ids=wanted[start:start + 500]))
        for p in self._points.values():
            if p.latest is not None and p.latest.id in whole:
                p.latest = whole[p.latest.id]
        self.others = [whole.get(r.id, r) for r in self.others]

    def records(self) -> list[RunRecord]:
        """The points and the other records, oldest (latest run) first."""
        out = [p.record() for p in self._points.values()] + self.others
        return sorted(out, key=lambda r: r.started_at)

    @property
    def runs(self) -> int:
        return sum(len(p.runs) for p in self._points.values()) + len(self.others)


def fold(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Records with the repeats of each measured configuration folded into one PointRecord."""
    folder = PointFolder()
    for r in records:
        folder.add(r)
    return folder.records()


def runs_of(r: RunRecord) -> int:
    """How many runs a record stands for (1 for a plain record)."""
    return r.count if isinstance(r, PointRecord) else 1
