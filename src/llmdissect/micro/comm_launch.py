"""The parent side of a collective benchmark: check the request, launch the ranks under
torchrun (with a progress bar fed by rank 0), build the `comm` record, fit alpha and beta,
and store the fits in the calibration profile. Used by `bench comm` and the quick suite.
"""
from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.micro.collectives import (
    BACKENDS,
    DTYPES,
    buffer_bytes_per_rank,
    check_dtype,
    parse_ops,
    parse_size,
    size_sweep,
)
from llmdissect.micro.comm_config import HOOKS, CommRequest

TARGET = "llmdissect.micro.comm_child:run"


def build_config(req: CommRequest) -> dict[str, Any]:
    """The validated run config (UserError on bad input, before anything is launched)."""
    ops = parse_ops(req.ops)
    lo, hi = parse_size(req.min_bytes), parse_size(req.max_bytes)
    size_sweep(lo, hi, req.factor)  # UserError on a bad range or factor; run_comm() builds the sweep
    check_dtype(req.dtype)
    if req.iters < 1 or req.warmup < 0:
        raise UserError(f"bad --iters {req.iters} / --warmup {req.warmup}: need iters >= 1 and warmup >= 0")
    max_iters = 5 * req.iters if req.max_iters is None else req.max_iters
    if req.min_time_s < 0 or max_iters < req.iters:
        raise UserError(f"bad --min-time-s {req.min_time_s:g} / --max-iters {max_iters}: need min-time-s >= 0 "
                        f"and max-iters >= --iters ({req.iters})")
    if req.passes < 1:
        raise UserError(f"bad --passes {req.passes}: must be 1 or more")
    if req.min_time_s > 0 and req.warmup < 1:
        raise UserError("--min-time-s needs --warmup 1 or more: the fastest warm-up call sets how many calls to time")
    if req.nproc < 1 or req.nnodes < 1 or not 0 <= req.node_rank < req.nnodes:
        raise UserError(f"bad process layout: --nproc {req.nproc}, --nnodes {req.nnodes}, --node-rank {req.node_rank}")
    world = req.nproc * req.nnodes
    if world < 2:
        raise UserError("a collective needs at least 2 processes: use --nproc 2 or more")
    if req.nnodes > 1 and not req.rdzv_endpoint:
        raise UserError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
    if req.timeout_s <= 0:
        raise UserError(f"bad --timeout-s {req.timeout_s:g}: must be above 0")
    backend, hardware = _check_backend(req.backend, req.nproc)
    if backend == "gloo":
        from llmdissect.specs.hardware import total_memory_bytes

        need = buffer_bytes_per_rank(ops, hi, DTYPES[req.dtype], world) * req.nproc
        if need > 0.8 * total_memory_bytes():
            raise UserError(f"--max-bytes {req.max_bytes} needs about {need / 2**30:.1f} GiB of buffers for "
                            f"{req.nproc} processes, more than this machine's memory allows; lower --max-bytes")
    config = {"hardware": hardware, "backend": backend, "nproc": req.nproc, "nnodes": req.nnodes,
              "world_size": world, "ops": ops, "min_bytes": lo, "max_bytes": hi, "factor": req.factor,
              "dtype": req.dtype, "iters": req.iters, "warmup": req.warmup,
              "min_time_s": req.min_time_s, "max_iters": max_iters, "passes": req.passes}
    config.update({k: v for k, v in req.hooks.items() if k in HOOKS and v is not None})
    return config


def _check_backend(backend: str | None, nproc: int) -> tuple[str, str]:
    """(backend, hardware name): nccl needs CUDA and a GPU per local process."""
    import torch
    import torch.distributed as dist

    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed")
    if backend == "gloo":
        return backend, "cpu"
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        raise UserError("backend nccl needs CUDA GPUs and a torch build with NCCL; none here (use --backend gloo)")
    if nproc > torch.cuda.device_count():
        raise UserError(f"--nproc {nproc} with nccl needs {nproc} GPUs; this node has {torch.cuda.device_count()}")
    return backend, torch.cuda.get_device_name(0)


def run_comm(config: dict[str, Any], req: CommRequest, progress: bool = True):
    """Launch the ranks and return (record, child). The record is built whatever the outcome."""
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_device_env
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    started = utc_now()
    sizes = size_sweep(config["min_bytes"], config["max_bytes"], config["factor"])
    with tempfile.TemporaryDirectory(prefix="llmdissect-comm-") as tmp:
        child_config = {**config, "sizes": sizes, "collective_timeout_s": req.timeout_s,
                        "progress_path": str(Path(tmp) / "progress.json")}
        launch = dict(nproc=req.nproc, nnodes=req.nnodes, node_rank=req.node_rank, rdzv_endpoint=req.rdzv_endpoint,
                      distributed=True, timeout_s=req.timeout_s)
        child = _with_progress(lambda: run_child(TARGET, child_config, **launch),
                               Path(child_config["progress_path"]), progress)
    if child.status == "failed" and req.nnodes > 1 and child.returncode == 0 and not child.rank_errors:
        # every rank here ended well, but global rank 0 (which writes the rows) was on another
        # node: c10d rendezvous hands out global ranks by arrival, not by --node-rank
        from llmdissect.launch import ChildResult

        child = ChildResult("ok", result={"metrics": {"rows": [], "node_rank": req.node_rank}}, returncode=0,
                            wall_s=child.wall_s)
    record = record_from_child(mn.COMM, config, child, capture_device_env(), started_at=started)
    if record.status == "ok" and record.metrics.get("rows"):
        add_summary(record.metrics)
    return record, child


def add_summary(metrics: dict[str, Any]) -> None:
    """`avg_busbw_bytes_per_s` (nccl-tests' "Avg bus bandwidth": the mean busbw of all rows)
    and `fits` (alpha-beta per operator, llmdissect.micro.comm_alpha_beta)."""
    from llmdissect.micro.comm_alpha_beta import fit_rows

    rows = metrics["rows"]
    metrics[mn.AVG_BUSBW_BYTES_PER_S] = sum(r[mn.BUSBW_BYTES_PER_S] for r in rows) / len(rows)
    metrics["fits"] = {op: fit.to_dict() for op, fit in fit_rows(rows).items()}


def store_fits(record, path: str | Path | None = None, stored_by: str = "bench comm") -> Path | None:
    """Write the record's fits into the calibration profile's `collectives.<backend>.<op>`.
    `stored_by="quick"` (the quick suite's way): replace only fits that an earlier quick suite
    stored, never a deliberate `bench comm` fit (nor one from before `stored_by` was kept)."""
    from llmdissect.calibration_profile import load_profile, update_profile

    fits = record.metrics.get("fits") or {}
    backend = record.config["backend"]
    if stored_by == "quick":
        have = load_profile(path).get("collectives", {}).get(backend, {})
        fits = {op: f for op, f in fits.items() if op not in have or have[op].get("stored_by") == "quick"}
    if record.status != "ok" or not fits:
        return None
    link = "intra-node" if record.config["nnodes"] == 1 else "inter-node"
    entries = {op: {**f, "nproc": record.config["world_size"], "nnodes": record.config["nnodes"], "link": link,
                    "dtype": record.config["dtype"], "hardware": record.config["hardware"],
                    "record_id": record.id, "measured_at": record.finished_at, "stored_by": stored_by}
               for op, f in fits.items()}
    return update_profile({"collectives": {backend: entries}}, path)


def _with_progress(launch, progress_file: Path, show: bool):
    """Run `launch()` here (so Ctrl-C still stops the ranks) while a thread moves a rich
    progress bar on stderr after rank 0's progress file."""
    if not show:
        return launch()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from llmdissect.console import err_console

    stop = threading.Event()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[rows]}"),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task("comm: starting the ranks", total=None, rows="")

        def follow() -> None:
            while not stop.wait(0.25):
                try:
                    state = json.loads(progress_file.read_text())
                except (OSError, ValueError):
                    continue
                bar.update(task, total=state["total"], completed=state["done"],
                           description=f"comm: {state['current']}", rows=f"{state['done']}/{state['total']} rows")

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        try:
            return launch()
        finally:
            stop.set()
            thread.join()
