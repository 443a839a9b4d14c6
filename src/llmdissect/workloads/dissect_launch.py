"""The parent side of `dissect pretrain|finetune|infer`: validate the point and the profiling
options, run the profiling child, make the `ops` record (config.what = dissect).

A training point is the TrainConfig of `train_launch.prepare`, the road `bench pretrain|finetune`
take too; an inference point is the one `bench infer` point of `infer_launch.expand_grid`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import llmdissect.metric_names as mn
from llmdissect.child_result import ChildResult
from llmdissect.errors import UserError
from llmdissect.results.schema import RunRecord

TRAIN_TARGET = "llmdissect.workloads.dissect_train_child:run"
INFER_TARGET = "llmdissect.workloads.dissect_infer_child:run"


@dataclass(frozen=True)
class DissectPlan:
    """A validated dissect run: the child to start, its config, and the record's config."""

    target: str
    child_config: dict[str, Any]
    record_config: dict[str, Any]
    nproc: int = 1


def check_profile(profile_steps: int, trace: Optional[Path]) -> Optional[str]:
    """The absolute trace path (or None), after checking --profile-steps and --trace."""
    if profile_steps < 1:
        raise UserError(f"--profile-steps must be at least 1, got {profile_steps}")
    if trace is None:
        return None
    trace = Path(trace)
    if trace.is_dir() or not trace.parent.is_dir():
        raise UserError(f"--trace {trace}: not a file in an existing folder")
    return str(trace.resolve())


def train_plan(kind: str, *, profile_steps: int, trace: Optional[Path] = None, **options: Any) -> DissectPlan:
    """A training point from TrainConfig fields given as keywords (`options`), profiled on
    every rank of one node (rank 0's profile is kept). The child times its own steps
    (`profile_steps` pairs), so the config's timed `steps` is 1."""
    from llmdissect.workloads.train_config import record_config
    from llmdissect.workloads.train_launch import prepare

    cfg = prepare(kind, steps=1, **options)
    if cfg.nnodes > 1:
        raise UserError("dissect profiles the processes of one node; run it without --nnodes")
    if cfg.engine == "deepspeed":
        raise UserError("dissect runs the DDP, FSDP2 and expert-parallel engines; DeepSpeed's steps are not marked")
    trace_path = check_profile(profile_steps, trace)
    rec = {"what": "dissect", "workload": kind, **record_config(cfg), "profile_steps": profile_steps}
    return DissectPlan(TRAIN_TARGET, {"train": cfg.model_dump(), "profile_steps": profile_steps,
                                      "trace": trace_path}, rec, nproc=cfg.nproc)


def infer_plan(*, profile_steps: int, trace: Optional[Path] = None, batch: int, input_len: int, output_len: int,
               cache: str, quant: str, **options: Any) -> DissectPlan:
    """One inference point (`options`: the other keywords of `expand_grid`: model, dtype,
    attn, warmup, seed, device), without compilation, profiled in one process."""
    from llmdissect.workloads.infer_launch import expand_grid, skip_reason

    if batch < 1 or input_len < 1 or output_len < 1:
        raise UserError("--batch, --input-len and --output-len must be at least 1")
    point = expand_grid(batch=[batch], input_len=[input_len], output_len=[output_len], cache=[cache], quant=[quant],
                        compile=False, repeats=1, **options)[0]
    reason = skip_reason(point)
    if reason:
        raise UserError(reason)
    trace_path = check_profile(profile_steps, trace)
    config = point.to_config()
    rec = {"what": "dissect", "workload": "infer", **config, "profile_steps": profile_steps}
    return DissectPlan(INFER_TARGET, {**config, "profile_steps": profile_steps, "trace": trace_path}, rec)


def plan_for(workload: str, **options: Any) -> DissectPlan:
    """The plan of `dissect <workload>` (pretrain | finetune | infer) from its options by name."""
    if workload == "infer":
        return infer_plan(**options)
    return train_plan(workload, **options)


def run_dissect(plan: DissectPlan, *, timeout_s: float | None, threads: int | None,
                progress: bool = True) -> tuple[RunRecord, ChildResult]:
    """Run the plan's child (with a progress bar on stderr when `progress`) and make its record."""
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.progress import run_with_progress
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    started = utc_now()
    child = run_with_progress(lambda cfg: run_child(plan.target, cfg, nproc=plan.nproc, timeout_s=timeout_s,
                                                    threads=threads),
                              plan.child_config, "dissect", progress)
    return record_from_child(mn.OPS, plan.record_config, child, capture_env(), started_at=started), child
