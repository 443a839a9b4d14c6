"""A suite point from plan to record: its measured config, the estimator's prediction, why
it is skipped (if it is), and how it runs, isolated in a child process, into a RunRecord.

Whatever happens to a point (ok, failed, oom, timeout, skipped) it ends as one record.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.analysis.predict import Prediction, predict_measured
from llmdissect.errors import UserError
from llmdissect.results.schema import RunRecord
from llmdissect.suites.spec import Point

DEFAULT_TIMEOUT_S = 1800.0
SERVE_TARGET = "llmdissect.suites.serve_point:run"


@dataclass
class Planned:
    """A point as the plan shows it and the runner runs it."""

    point: Point
    config: dict[str, Any] = field(default_factory=dict)
    prediction: Prediction = field(default_factory=Prediction)
    skip: str | None = None
    """Reason the point will be stored as `skipped` instead of run."""
    fit_skip: bool = False
    """The skip is the estimator's 'does not fit' (which --force overrides)."""
    work: Any = None

    @property
    def key(self) -> str:
        return self.point.key


def plan_point(point: Point) -> Planned:
    """Everything decided before anything runs (no torch, no child)."""
    planner = {mn.PRETRAIN: _plan_train, mn.FINETUNE: _plan_train, mn.INFER: _plan_infer, mn.COMM: _plan_comm,
               mn.SERVE: _plan_serve, mn.OPS: _plan_ops, mn.ESTIMATE: _plan_estimate}[point.kind]
    return planner(Planned(point))


def _plan_train(p: Planned) -> Planned:
    from llmdissect.config import parse_config
    from llmdissect.workloads.train_config import TrainConfig, record_config, validate
    from llmdissect.workloads.train_memory_gate import check_fits

    cfg = parse_config(TrainConfig, kind=p.point.kind, **p.point.options)
    p.config = {k: v for k, v in p.point.options.items()}
    try:
        cfg = validate(cfg)
    except UserError as e:
        p.skip = f"cannot run here: {e}"
        return p
    p.config, p.work = record_config(cfg), cfg
    p.prediction = predict_measured(p.point.kind, p.config)
    try:
        check_fits(cfg)
    except UserError as e:
        p.skip, p.fit_skip = str(e), True
    if p.prediction.fits is False and not p.skip:
        p.skip, p.fit_skip = f"estimator: {p.prediction.reason}", True
    return p


def _plan_infer(p: Planned) -> Planned:
    from llmdissect.suites.kinds import infer_defaults
    from llmdissect.workloads.infer_config import GRID_FIELDS
    from llmdissect.workloads.infer_launch import expand_grid, skip_reason

    o = {**infer_defaults(), **p.point.options}
    p.config = dict(o)
    try:
        point = expand_grid(**{k: ([v] if k in GRID_FIELDS else v) for k, v in o.items()})[0]
    except UserError as e:
        p.skip = f"cannot run here: {e}"
        return p
    p.config, p.work = point.to_config(), point
    p.skip = skip_reason(point)
    p.prediction = predict_measured(mn.INFER, p.config)
    if p.prediction.fits is False and not p.skip:
        p.skip, p.fit_skip = f"estimator: {p.prediction.reason}", True
    return p


def _plan_comm(p: Planned) -> Planned:
    from llmdissect.micro.comm_config import CommRequest
    from llmdissect.micro.comm_launch import build_config

    o = {k: (str(v) if k in ("min_bytes", "max_bytes") else v) for k, v in p.point.options.items()}
    p.config = dict(o)
    req = CommRequest(**o)  # the suite's comm options are CommRequest fields (suites.kinds)
    try:
        p.config = build_config(req)
    except UserError as e:
        p.skip = f"cannot run here: {e}"
        return p
    p.work = req
    from llmdissect.analysis.predict import predict_comm

    p.prediction = predict_comm(p.config)
    return p


def _plan_serve(p: Planned) -> Planned:
    p.config = {"model": "tiny-llama", **p.point.options}
    return p


def _plan_ops(p: Planned) -> Planned:
    p.config = dict(p.point.options)
    try:
        from llmdissect.micro.ops_config import OpsConfig
    except ImportError:
        p.skip = "no operator benchmark (`bench ops`) in this build"
        return p
    p.work = OpsConfig(**p.point.options)
    p.config = {"what": "ops", **p.work.model_dump()}
    return p


def _plan_estimate(p: Planned) -> Planned:
    p.prediction = predict_estimate(p.point.options)
    est = p.prediction.estimate
    p.config = dict(est.config) if est is not None else dict(p.point.options)
    if est is None:
        p.skip = f"the estimator refuses it: {p.prediction.reason}"
    return p


# ---- running --------------------------------------------------------------------------------
def run_planned(p: Planned, *, timeout_s: float | None, max_memory: str | None, force: bool) -> RunRecord:
    """Run one planned point (isolated in a child process) and return its record, unsaved."""
    from llmdissect.measure.env import capture_env

    if p.skip and not (force and p.fit_skip):
        return RunRecord(kind=p.point.kind, config=dict(p.config), env=capture_env()).finish("skipped", p.skip)
    timeout = p.point.timeout_s or timeout_s or DEFAULT_TIMEOUT_S
    limit_text = p.point.max_memory or max_memory
    limit = None
    if limit_text:
        from llmdissect.units import parse_bytes

        limit = parse_bytes(limit_text, "max_memory")
    runner: Callable[..., RunRecord] = {mn.PRETRAIN: _run_train, mn.FINETUNE: _run_train, mn.INFER: _run_infer,
                                        mn.COMM: _run_comm, mn.SERVE: _run_serve, mn.OPS: _run_ops,
                                        mn.ESTIMATE: _run_estimate}[p.point.kind]
    try:
        return runner(p, timeout, limit)
    except UserError as e:  # bad input found only at run time: this point fails, the suite goes on
        return RunRecord(kind=p.point.kind, config=dict(p.config), env=capture_env()).finish("failed", str(e))


def _run_train(p: Planned, timeout: float, limit: int | None) -> RunRecord:
    from llmdissect.workloads.train_launch import run_training

    record, _ = run_training(p.work, timeout_s=timeout, max_memory_bytes=limit)
    return record


def _run_infer(p: Planned, timeout: float, limit: int | None) -> RunRecord:
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now
    from llmdissect.workloads.infer_launch import TARGET

    started = utc_now()
    child = run_child(TARGET, p.config, timeout_s=timeout, max_memory_bytes=limit)
    return record_from_child(mn.INFER, p.config, child, capture_env(), started_at=started)


def _run_comm(p: Planned, timeout: float, limit: int | None) -> RunRecord:
    from llmdissect.micro.comm_launch import run_comm

    req = p.work.model_copy(update={"timeout_s": timeout})
    record, _ = run_comm(p.config, req, progress=False)  # the suite shows its own bar
    return record


def _run_ops(p: Planned, timeout: float, limit: int | None) -> RunRecord:
    from llmdissect.micro.ops_launch import run_ops

    record, _ = run_ops(p.work, progress=False, timeout_s=timeout, store_profile=False)
    return record


def _run_serve(p: Planned, timeout: float, limit: int | None) -> RunRecord:
    """A local server and the load generator, together in one child (killed as one on timeout)."""
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    started = utc_now()
    child = run_child(SERVE_TARGET, p.config, timeout_s=timeout, max_memory_bytes=limit)
    if child.status == "ok" and child.result and "record" in child.result:
        return RunRecord.from_dict(child.result["record"])
    return record_from_child(mn.SERVE, p.config, child, capture_env(), started_at=started)


def _run_estimate(p: Planned, timeout: float, limit: int | None) -> RunRecord:
    from llmdissect.perfmodel.request import estimate_env

    return p.prediction.estimate.to_record(estimate_env(None))


def predict_estimate(options: dict[str, Any]) -> Prediction:
    """An `estimate` entry is its own prediction (computed once, at plan time)."""
    from llmdissect.perfmodel.request import build_estimate
    from llmdissect.suites.kinds import estimate_opts

    try:
        est = build_estimate(options["workload"], estimate_opts(options))
    except UserError as e:
        return Prediction(reason=str(e))
    m = est.metrics
    return Prediction(fits=est.fits, reason=None if est.fits else est.verdict(), tokens_per_s=m.get(mn.TOKENS_PER_S),
                      memory_bytes=m[mn.MEMORY][mn.TOTAL_BYTES], estimate=est)
