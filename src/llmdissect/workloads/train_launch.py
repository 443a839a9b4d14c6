"""The parent side of a training benchmark: validate, launch the child, make the record."""
from __future__ import annotations

from typing import Any

from llmdissect.child_result import ChildResult
from llmdissect.results.schema import RunRecord
from llmdissect.workloads.train_config import TrainConfig, record_config, validate

TARGET = "llmdissect.workloads.train_child:run"


def prepare(kind: str, **options: Any) -> TrainConfig:
    """A validated config (UserError on bad input), checked to fit in memory."""
    from llmdissect.config import parse_config
    from llmdissect.workloads.train_memory_gate import check_fits

    cfg = validate(parse_config(TrainConfig, kind=kind, **options))
    check_fits(cfg)
    return cfg


def run_training(cfg: TrainConfig, *, timeout_s: float | None = 1800, max_memory_bytes: int | None = None,
                 threads: int | None = None) -> tuple[RunRecord, ChildResult]:
    """Run one validated config in a child process (torchrun for several processes)."""
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    started = utc_now()
    # DeepSpeed wants a process group even alone: torchrun provides its environment
    child = run_child(TARGET, cfg.model_dump(), nproc=cfg.nproc, nnodes=cfg.nnodes, rdzv_endpoint=cfg.rdzv_endpoint,
                      distributed=cfg.engine == "deepspeed", timeout_s=timeout_s, max_memory_bytes=max_memory_bytes,
                      threads=threads)
    return record_from_child(cfg.kind, record_config(cfg), child, capture_env(), started_at=started), child
