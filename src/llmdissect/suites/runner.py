"""`llmdissect run SUITE` for suite files: plan, show, run each point isolated, resume.

Each point's record is written in its own transaction as soon as the point ends, tagged
with the suite and the point's key (`config.suite_point`). `--resume` asks the store which
keys are recorded and runs only the others, so a suite killed at any moment (SIGKILL
included) and started again runs every point exactly once.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.results.schema import RunRecord
from llmdissect.suites.points import Planned, plan_point, run_planned
from llmdissect.suites.spec import Suite, load

FAILED = ("failed", "oom", "timeout")


@dataclass
class RunOptions:
    db: Path | None = None
    resume: bool = False
    retry_failed: bool = False
    """With resume: run again the points whose latest record is failed, oom or timeout."""
    force: bool = False
    timeout_s: float | None = None
    max_memory: str | None = None
    point: str | None = None
    """Run only the point whose key starts with this (how a Slurm job runs its point)."""
    rdzv_endpoint: str | None = None
    """host:port of the c10d rendezvous of a multi-node point (a Slurm job's first node)."""
    node_rank: int = 0
    records_dir: Path | None = None
    """Write each record to a per-job file in this folder instead of the store (a job on
    another host: see results/jobfiles.py); `--resume` then reads this folder."""


@dataclass
class Plan:
    suite: Suite
    items: list[Planned]
    recorded: dict[str, RunRecord] = field(default_factory=dict)
    """key -> the latest record of that point already in the store (with --resume)."""

    def todo(self) -> list[Planned]:
        return [p for p in self.items if p.key not in self.recorded]


def point_key_of(record: RunRecord) -> str | None:
    return (record.config or {}).get("suite_point")


def recorded_points(db: Path | None, suite_name: str, records_dir: Path | None = None) -> dict[str, RunRecord]:
    """The records of this suite in the store, by point key (latest wins). Reads only.
    With `records_dir` (a job on another host) the job files there are read, not the store."""
    from llmdissect.paths import default_db_path
    from llmdissect.results.location import server_url
    from llmdissect.results.store import open_store

    if records_dir is not None:
        from llmdissect.results.jobfiles import read_folder

        found = sorted((r for r in read_folder(records_dir) if r.suite == suite_name), key=lambda r: r.started_at)
        return {k: r for r in found if (k := point_key_of(r))}
    path = db if db is not None else default_db_path()
    if not server_url(path) and not Path(path).exists():
        return {}
    with open_store(path) as store:
        return {k: r for r in store.query(suite=suite_name) if (k := point_key_of(r))}


def make_plan(name_or_path: str, opts: RunOptions) -> Plan:
    suite = load(name_or_path)
    items = [plan_point(p) for p in suite.points]
    if opts.point:
        items = [p for p in items if p.key.startswith(opts.point)]
        if len(items) != 1:
            raise UserError(f"--point {opts.point!r} matches {len(items)} points of suite {suite.name}; "
                            "give a key from `--plan`")
    for p in items:
        if p.point.kind in mn.TRAIN_KINDS and p.work is not None and p.work.nnodes > 1:
            if opts.rdzv_endpoint:
                p.work = p.work.model_copy(update={"rdzv_endpoint": opts.rdzv_endpoint})
            elif not p.skip:
                p.skip = f"runs on {p.work.nnodes} nodes: use --executor slurm (one job across the nodes)"
    recorded = recorded_points(opts.db, suite.name, opts.records_dir) if opts.resume else {}
    if opts.retry_failed:
        recorded = {k: r for k, r in recorded.items() if r.status not in FAILED}
    if opts.force:  # points skipped as too big earlier are run now
        recorded = {k: r for k, r in recorded.items() if r.status != "skipped"}
    return Plan(suite, items, recorded)


def should_store(record: RunRecord, planned: Planned, node_rank: int) -> bool:
    """On a multi-node point every node runs this; one record must come out: the node whose
    torchrun held global rank 0 has the metrics, and node 0 alone writes a failure."""
    if int(planned.config.get("nnodes", 1) or 1) <= 1:
        return True
    if record.status == "ok" and record.metrics.get(mn.STEP_TIME_S):
        return True
    rank0_elsewhere = record.status == "failed" and "exited with code 0" in (record.error or "")
    return node_rank == 0 and not rank0_elsewhere


def tag(record: RunRecord, planned: Planned, suite: Suite) -> RunRecord:
    record.suite = suite.name
    record.config = {**(record.config or {}), "suite_point": planned.key}
    if planned.point.name:
        record.config["suite_entry"] = planned.point.name
    return record


def execute(plan: Plan, opts: RunOptions, store_path: Path | None, on_record=None) -> list[RunRecord]:
    """Run every point still to do, storing each record as it ends (in the store, or in a
    per-job file with `opts.records_dir`); returns the new records."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from llmdissect.console import err_console
    from llmdissect.suites.sink import RecordSink

    _terminate_on_sigterm()
    todo = plan.todo()
    done_before = len(plan.items) - len(todo)
    new: list[RunRecord] = []
    failed = sum(1 for r in plan.recorded.values() if r.status in FAILED)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("points, {task.fields[failed]} failed, elapsed"), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    sink = RecordSink(store_path, opts.records_dir)
    from llmdissect.launch.warm import warm_children

    # several points: each child forked from one process that imported torch once
    warm = warm_children() if len(todo) > 1 else contextlib.nullcontext()
    with warm, sink, Progress(*columns, console=err_console) as progress:
        task = progress.add_task(f"suite {plan.suite.name}", total=len(plan.items), completed=done_before,
                                 failed=failed)
        for planned in todo:
            progress.update(task, description=f"{plan.suite.name}: {planned.point.kind} {planned.key[:8]}")
            t0 = time.perf_counter()
            try:
                record = run_planned(planned, timeout_s=opts.timeout_s, max_memory=opts.max_memory,
                                     force=opts.force)
            except (KeyboardInterrupt, SystemExit):
                progress.console.print(f"stopped during point {planned.key[:8]} (not recorded); {len(new)} point(s) "
                                       f"recorded in this run; `--resume` runs the rest", markup=False)
                raise
            if not should_store(record, planned, opts.node_rank):
                progress.update(task, advance=1)
                continue
            sink.add(tag(record, planned, plan.suite), planned.key)
            new.append(record)
            failed += record.status in FAILED
            progress.update(task, advance=1, failed=failed)
            why = f": {record.error}" if record.error else ""
            progress.console.print(f"{planned.key[:8]} {planned.point.label()[:90]} -> {record.status} "
                                   f"({time.perf_counter() - t0:.1f} s){why[:200]}", markup=False, soft_wrap=True)
            if on_record:
                on_record(record)
    return new


def _terminate_on_sigterm() -> None:
    """SIGTERM (scancel, a batch system's time limit, `kill`) unwinds like Ctrl-C, so the
    launcher kills the running point's processes instead of leaving them orphaned; the
    point has no record and `--resume` runs it again."""
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    if threading_main():
        signal.signal(signal.SIGTERM, stop)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def plan_record(plan: Plan, results: dict[str, RunRecord] | None = None) -> RunRecord:
    """The plan as one record of kind `plan` (what `--plan --json` prints)."""
    results = results or {}
    points = []
    for p in plan.items:
        done = results.get(p.key) or plan.recorded.get(p.key)
        points.append({"key": p.key, "kind": p.point.kind, "entry": p.point.entry, "name": p.point.name,
                       "options": p.point.options, "config": p.config, "prediction": p.prediction.to_dict(),
                       "action": action(p, plan), "skip_reason": p.skip,
                       "status": done.status if done else None, "record_id": done.id if done else None,
                       "error": done.error if done else None})
    counts: dict[str, Any] = {}
    for pt in points:
        if pt["status"]:
            counts[pt["status"]] = counts.get(pt["status"], 0) + 1
    rec = RunRecord(kind=mn.PLAN, source="estimated", suite=plan.suite.name,
                    config={"suite": plan.suite.name, "source": plan.suite.source,
                            "description": plan.suite.description},
                    metrics={"points": points, "total": len(points), "duplicates_dropped": plan.suite.duplicates,
                             "counts": counts})
    return rec.finish("ok")


def action(p: Planned, plan: Plan, force: bool = False) -> str:
    if p.key in plan.recorded:
        return f"done ({plan.recorded[p.key].status})"
    if p.skip and not (force and p.fit_skip):
        return "skip"
    return "run"


def exit_code(plan: Plan, new: list[RunRecord]) -> int:
    statuses = [r.status for r in new] + [r.status for k, r in plan.recorded.items()
                                          if k in {p.key for p in plan.items}]
    return 1 if any(s in FAILED for s in statuses) else 0
