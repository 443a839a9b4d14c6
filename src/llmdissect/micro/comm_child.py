"""The per-rank side of `bench comm`: collectives over torch.distributed, timed and checked.

Run under torchrun by `llmdissect.launch.run_child("llmdissect.micro.comm_child:run", config, nproc=N)`.
Each rank, for every operator, size and placement (docs/metrics.md, "Collectives"):

- fills its buffers with known inputs: a base drawn with a fixed seed (the same on every
  rank, small integers 1..4 so that sums are exact even in bf16) plus `rank % 4`;
- per iteration: resets the buffers, meets the others at a barrier, times the collective
  alone, then compares every element of the result with the expected values (untimed);
- after the iterations, all ranks exchange their per-iteration times and wrong-element
  counts; the row's time is, per iteration, the slowest rank's, and a single wrong element
  anywhere fails the whole run (on every rank, so none is left waiting).

Config keys: `backend` (gloo | nccl), `ops`, `sizes` (bytes), `dtype`, `iters`, `warmup`,
`min_time_s` and `max_iters` (more timed calls for short sizes, see `_timed_iters`),
`passes` (sweep every row this many times, each with 1/passes of its timed calls and
`min_time_s`, and keep each row's quietest pass: a stretch that another process slowed
covers one pass of a row, not all of them, see `_fold`),
`seed`, `collective_timeout_s`, `progress_path` (rank 0 writes {"done", "total", "current"}).
Test hooks (documented so tests can prove the checks work; never set by users):
`check_offset` is added to every expected value, so a correct collective must be reported
wrong (use a whole number with bf16/fp16, whose spacing reaches 1 above 128); `die_rank`
makes that rank exit with code 17 after `die_after_rows` rows (default 1), `hang_rank` makes
it sleep there instead. The CLI passes them as the hidden options `--check-offset`,
`--die-rank` and `--hang-rank`.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.micro.collectives import DTYPES, IN_PLACE, OPS, algbw_bytes_per_s

DIE_EXIT_CODE = 17


def run(config: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    backend = config.get("backend", "gloo")
    device = "cpu"
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    timeout = timedelta(seconds=float(config.get("collective_timeout_s", 300)))
    if backend == "nccl":
        dist.init_process_group(backend, timeout=timeout, device_id=torch.device(device))
    else:
        dist.init_process_group(backend, timeout=timeout)
    try:
        rows = _sweep(config, device)
        env = {"comm_backend": backend, "world_size": dist.get_world_size(), "comm_device": device}
        if backend == "nccl":
            env["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        return {"metrics": {"rows": rows}, "env": env}
    finally:
        dist.destroy_process_group()


def _sweep(config: dict[str, Any], device: str) -> list[dict[str, Any]]:
    import torch.distributed as dist

    from llmdissect.measure import Timer

    rank = dist.get_rank()
    timer = Timer(device)
    plan = [(op, size, placement) for op in config["ops"] for size in config["sizes"]
            for placement in OPS[op].placements]
    passes = max(1, int(config.get("passes", 1)))
    by_pass: list[list[dict[str, Any]]] = []
    for p in range(passes):
        cfg = config if passes == 1 else _pass_config(config, passes, first=p == 0)
        rows: list[dict[str, Any]] = []
        for i, (op, size, placement) in enumerate(plan):
            if i == int(config.get("die_after_rows", 1)) and p == 0:
                if config.get("die_rank") == rank:
                    os._exit(DIE_EXIT_CODE)  # test hook: a rank lost mid-run
                if config.get("hang_rank") == rank:
                    time.sleep(10**6)  # test hook: a rank stuck mid-run
            if rank == 0:
                _progress(config, p * len(plan) + i, passes * len(plan), f"{op} {placement} {size} B")
            rows.append(_measure(op, placement, size, cfg, device, timer, seed=int(config.get("seed", 0)) + i))
        by_pass.append(rows)
    if rank == 0:
        _progress(config, passes * len(plan), passes * len(plan), "done")
    return by_pass[0] if passes == 1 else [_fold([rows[i] for rows in by_pass]) for i in range(len(plan))]


def _pass_config(config: dict[str, Any], passes: int, first: bool) -> dict[str, Any]:
    """One of `passes` sweeps: its share of the timed calls and of `min_time_s`; the full
    warm-up before the first sweep only (the later ones repeat one call to set their count)."""
    import math

    return {**config, "iters": math.ceil(int(config.get("iters", 20)) / passes),
            "max_iters": math.ceil(int(config.get("max_iters", config.get("iters", 20))) / passes),
            "min_time_s": float(config.get("min_time_s", 0.0)) / passes,
            "warmup": int(config.get("warmup", 5)) if first else min(1, int(config.get("warmup", 5)))}


def _fold(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the same row of every pass: the quietest pass's, the one whose calls (the
    slowest rank's each) have the lowest median, with the first call of the first pass. On a
    shared machine a slow stretch lasts seconds and covers whole rows of one sweep; another
    pass of the row misses it (the quick suite's sweep, scored against its own alpha-beta fit,
    read a mean error of 17-27 % in six rounds against 25-37 % for one pass of the same calls,
    each round side by side; folding every pass's calls into one median: 20-33 %)."""
    quietest = min(rows, key=lambda r: statistics.median(r["_samples"]))
    for r in rows:
        r.pop("_samples")
    row = dict(quietest)
    row["first_call_s"] = rows[0].get("first_call_s")
    row["passes"] = len(rows)
    return row


def _progress(config: dict[str, Any], done: int, total: int, current: str) -> None:
    path = config.get("progress_path")
    if path:
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps({"done": done, "total": total, "current": current}))
        tmp.replace(path)


def _measure(op: str, placement: str, size: int, config: dict[str, Any], device: str, timer,
             seed: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from llmdissect.dtypes import torch_dtype
    from llmdissect.measure import Stats

    rank, n = dist.get_rank(), dist.get_world_size()
    spec, elem = OPS[op], DTYPES[config["dtype"]]
    count = spec.count(size, elem, n)
    base = torch.randint(1, 5, (count,), generator=torch.Generator().manual_seed(seed))
    base = base.to(device=device, dtype=torch_dtype(config["dtype"]))
    reset, call, result, expected = _setup(op, placement, base, rank, n)
    if expected is not None and config.get("check_offset"):
        expected = expected + float(config["check_offset"])
    warmup = int(config.get("warmup", 5))
    times, wrongs = [], []
    for timed in (False, True):  # the timed count is set by the fastest warm-up call
        for _ in range(_timed_iters(config, min(times) if times else 0.0, device) if timed else warmup):
            reset()
            dist.barrier()
            t0 = timer.now()
            call()
            t1 = timer.now()
            times.append(timer.elapsed_s(t0, t1))
            wrongs.append(0 if expected is None else int((result != expected).sum()))
    del base, expected
    # Every rank's per-iteration times and wrong counts, so all agree on the row and on failure.
    local = torch.tensor([times, wrongs], dtype=torch.float64, device=device)  # [2, T]
    every = torch.empty(n * local.numel(), dtype=torch.float64, device=device)
    _all_gather(every, local.flatten())
    every = every.view(n, 2, -1).cpu()
    _raise_if_wrong(every[:, 1], op, placement, count * elem)
    slowest = every[:, 0, warmup:].max(dim=0).values.tolist()  # per iteration, the slowest rank
    stats = Stats.of(slowest)
    return {"op": op, "placement": placement, mn.SIZE_BYTES: count * elem, mn.COUNT: count, "dtype": config["dtype"],
            "redop": spec.redop, "root": spec.root, "nproc": n, mn.TIME_S: stats.to_dict(),
            mn.ALGBW_BYTES_PER_S: algbw_bytes_per_s(count * elem, stats.median),
            # busbw = algbw x nccl-tests' factor for this operator and n (docs/metrics.md)
            mn.BUSBW_BYTES_PER_S: algbw_bytes_per_s(count * elem, stats.median) * spec.busbw_factor(n),
            "busbw_factor": spec.busbw_factor(n), mn.WRONG: 0,
            "first_call_s": float(every[:, 0, 0].max()) if warmup else None,
            "rank_median_time_s": [statistics.median(every[r, 0, warmup:].tolist()) for r in range(n)],
            **({"_samples": slowest} if int(config.get("passes", 1)) > 1 else {})}


def _timed_iters(config: dict[str, Any], warmup_s: float, device: str) -> int:
    """`iters`, or more where `min_time_s` asks for it: enough calls of the fastest warm-up's
    length to fill min_time_s, at most `max_iters` (the fastest: one warm-up call that woke
    late, ten times its usual length, would cut a small row to `iters` calls). Ranks take the largest count, so that all
    make the same calls. Why: on a shared machine a share of small calls wakes late (a
    bimodal time), and the median of 10 such calls flips between the two modes from run to run."""
    import math

    import torch
    import torch.distributed as dist

    iters, budget = int(config.get("iters", 20)), float(config.get("min_time_s", 0.0))
    if budget <= 0 or int(config.get("warmup", 5)) < 1:  # the same on every rank: none waits alone
        return iters
    want = min(int(config.get("max_iters", iters)), max(iters, math.ceil(budget / max(warmup_s, 1e-9))))
    agreed = torch.tensor([float(want)], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return int(agreed.item())


def _raise_if_wrong(wrong, op: str, placement: str, size_bytes: int) -> None:
    """`wrong`: [ranks, iterations] wrong-element counts; any non-zero fails the run."""
    if float(wrong.sum()) == 0:
        return
    bad = wrong.nonzero()
    rank, it = int(bad[0][0]), int(bad[0][1])
    raise RuntimeError(f"wrong result: {op} {placement} {size_bytes} B: {int(wrong[rank, it])} of the expected "
                       f"elements differ on rank {rank} in iteration {it} ({int((wrong > 0).sum())} rank-iterations "
                       f"wrong in all); the collective returned data that is not the known sum/copy")


def _all_gather(out, inp) -> None:
    import torch.distributed as dist

    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)


def _reduce_scatter(out, inp) -> None:
    import torch.distributed as dist

    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)


def _setup(op: str, placement: str, base, rank: int, n: int) -> tuple[Callable[[], None], Callable[[], None], Any, Any]:
    """Buffers for one row: (reset, call, result tensor, expected tensor or None).

    Rank r contributes `base + r % 4` (its chunk of it, for all_gather); `base` has `count`
    elements, the larger buffer's; c = count / n is one rank's chunk."""
    import torch
    import torch.distributed as dist

    c = base.numel() // n
    offsets = [float(r % 4) for r in range(n)]
    total = sum(offsets)
    src = base + offsets[rank]

    def by_chunk():  # [count]: chunk k holds k % 4, rank k's offset
        return torch.tensor(offsets, dtype=base.dtype, device=base.device).repeat_interleave(c)
    mine = slice(rank * c, (rank + 1) * c)
    if op in ("all_reduce", "reduce", "broadcast"):
        buf = torch.empty_like(base)
        if op == "broadcast":
            src = base if rank == 0 else torch.full_like(base, -1)
        call = {"all_reduce": lambda: dist.all_reduce(buf), "reduce": lambda: dist.reduce(buf, dst=0),
                "broadcast": lambda: dist.broadcast(buf, src=0)}[op]
        expected = base if op == "broadcast" else base * n + total
        return (lambda: buf.copy_(src)), call, buf, (None if op == "reduce" and rank != 0 else expected)
    if op == "all_gather":
        out = torch.empty_like(base)
        chunk = (base[mine] + offsets[rank]).contiguous()
        inp = out[mine] if placement == IN_PLACE else chunk

        def reset() -> None:
            out.fill_(-1)
            if placement == IN_PLACE:
                inp.copy_(chunk)
        return reset, (lambda: _all_gather(out, inp)), out, base + by_chunk()
    if op == "reduce_scatter":
        inp = torch.empty_like(base)
        out = inp[mine] if placement == IN_PLACE else torch.empty(c, dtype=base.dtype, device=base.device)
        return (lambda: inp.copy_(src)), (lambda: _reduce_scatter(out, inp)), out, base[mine] * n + total
    out = torch.empty_like(base)
    if op == "all_to_all":  # chunk j of rank r's output is chunk r of rank j's input
        expected = base[mine].repeat(n) + by_chunk()
        return (lambda: out.fill_(-1)), (lambda: dist.all_to_all_single(out, src)), out, expected
    if op == "send_recv":  # a ring: send to rank + 1, receive from rank - 1
        peer_to, peer_from = (rank + 1) % n, (rank - 1) % n

        def call() -> None:
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, src, peer_to),
                                                dist.P2POp(dist.irecv, out, peer_from)]):
                work.wait()
        return (lambda: out.fill_(-1)), call, out, base + offsets[peer_from]
    raise ValueError(f"unknown collective {op!r}")
