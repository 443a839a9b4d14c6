"""The quick suite: what `make run` does on this machine, about a minute on 2 quiet CPU cores
(its children are forked from one warm process: launch/warm.py).

Steps come from modules listed in QUICK_STEP_MODULES; each has `quick_steps()` returning
QuickStep objects, so a workload adds itself to the suite without touching this file's logic.
"""
from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import ResultStore, check_writable, open_store

SUITE_NAME = "quick"

QUICK_STEP_MODULES: list[str] = [
    "llmdissect.suites.quick_ops",
    "llmdissect.suites.quick_foundation",
    "llmdissect.suites.quick_train",
    "llmdissect.suites.quick_deepspeed",
    "llmdissect.suites.quick_infer",
    "llmdissect.suites.quick_moe",
    "llmdissect.suites.quick_comm",
    "llmdissect.suites.quick_serve",
    "llmdissect.suites.quick_estimate",
    "llmdissect.suites.quick_validate",  # keep last: it validates what the steps above measured
]


@dataclass
class QuickContext:
    """What a step gets: the open store (records it adds are tagged with the suite)."""

    store: ResultStore
    db_path: Path
    log: Callable[[str], None]
    records: list[RunRecord] = field(default_factory=list)

    def save(self, record: RunRecord) -> RunRecord:
        record.suite = record.suite or SUITE_NAME
        self.store.add(record)
        self.records.append(record)
        return record


@dataclass(frozen=True)
class QuickStep:
    name: str
    description: str
    run: Callable[[QuickContext], None]


def quick_steps() -> list[QuickStep]:
    steps: list[QuickStep] = []
    modules = [importlib.import_module(name) for name in QUICK_STEP_MODULES]
    for module in sorted(modules, key=lambda m: getattr(m, "RUN_LAST", False)):  # stable: listed order
        steps.extend(module.quick_steps())
    return steps


def run_quick(db: Path | None, only: list[str] | None = None) -> int:
    """Run every step (or those named in `only`); returns the number of failed steps."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from llmdissect.console import console, table

    db_path = check_writable(db)
    steps = quick_steps()
    if only:
        unknown = set(only) - {s.name for s in steps}
        if unknown:
            raise UserError(f"unknown quick-suite step(s): {', '.join(sorted(unknown))}; "
                            f"steps: {', '.join(s.name for s in steps)}")
        steps = [s for s in steps if s.name in only]
    failures: list[tuple[str, str]] = []
    timings: list[tuple[str, float, str]] = []
    from llmdissect.launch.warm import warm_children

    with warm_children(), open_store(db_path) as store, Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                                TextColumn("{task.completed}/{task.total} steps"),
                                                TimeElapsedColumn(), console=Console(stderr=True)) as progress:
        ctx = QuickContext(store=store, db_path=db_path, log=lambda m: progress.console.print(m))
        task = progress.add_task("quick suite", total=len(steps))
        for step in steps:
            progress.update(task, description=f"quick: {step.name}")
            t0 = time.perf_counter()
            try:
                step.run(ctx)
                outcome = "ok"
            except UserError as e:
                outcome = f"failed: {e}"
                failures.append((step.name, str(e)))
            except Exception as e:  # a broken step must not lose the others' records
                outcome = f"failed: {type(e).__name__}: {e}"
                failures.append((step.name, outcome))
            timings.append((step.name, time.perf_counter() - t0, outcome))
            progress.advance(task)
    console.print(table("Quick suite", ["step", "seconds", "outcome"],
                        [(n, f"{s:.1f}", o) for n, s, o in timings], justify_numbers=False))
    by_status: dict[str, int] = {}
    for r in ctx.records:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "no records"
    console.print(f"Results: {db_path} ({summary}); see `llmdissect results list --suite quick --db {db_path}`")
    if ctx.records:  # the records are stored already: a report that fails loses nothing
        try:
            from llmdissect.report.build import write_run_report

            console.print(f"Report: {write_run_report(db_path, [r.id for r in ctx.records], SUITE_NAME)}")
        except Exception as e:
            console.print(f"Report not written ({type(e).__name__}: {e}); try `llmdissect report --suite quick "
                          f"--db {db_path} --out DIR`", markup=False)
    return len(failures)
