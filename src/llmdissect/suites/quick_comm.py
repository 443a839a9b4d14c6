"""Quick-suite step of the collectives: a 2-process gloo sweep of all-reduce, all-gather and
reduce-scatter (the three DDP, FSDP and ZeRO run, so that the estimates of the training
points take fitted costs for each), 1 KiB to 32 MiB (nccl-tests semantics, every result
checked), about 20 s on 2 cores."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

QUICK_SIZES = ("1K", "32M")
QUICK_ROW_S = 0.03
"""Small sizes are timed until their calls add up to this (up to 60 calls): on this shared VM a
third of small calls wake late, and the median of 10 flipped between the fast and slow mode."""
QUICK_PASSES = 3
"""Sweeps of every row, each with a third of its calls; a row keeps its quietest (comm_child._fold).
A slow stretch here lasts seconds and covers whole rows: the sweep's own-fit error read 17-27 %
in six rounds against 25-37 % for one pass, each pair side by side, for 2-3 s more."""
QUICK_WARMUP = 3
"""The calls a row makes before its timed ones; the fastest of them sets how many are timed
(comm_child._timed_iters). A call that wakes late takes ~4 ms instead of ~0.4 (its slow mode),
and with two warm-up calls both were late often enough that a row got 10 timed calls, whose
median flipped: its own fit's MAPE over the sweep read 35-50 % with two, 14-39 % with three."""


def _comm(ctx: QuickContext) -> None:
    from llmdissect.micro.comm_config import CommRequest
    from llmdissect.micro.comm_launch import build_config, run_comm, store_fits

    req = CommRequest(ops="all_reduce,all_gather,reduce_scatter", min_bytes=QUICK_SIZES[0],
                      max_bytes=QUICK_SIZES[1], factor=2, iters=10, warmup=QUICK_WARMUP, min_time_s=QUICK_ROW_S,
                      max_iters=60, passes=QUICK_PASSES, backend="gloo", nproc=2, timeout_s=240)
    record, _ = run_comm(build_config(req), req, progress=False)  # the suite shows its own bar
    ctx.save(record)
    if record.status != "ok":
        from rich.markup import escape  # gloo's messages hold [file:line], which rich reads as markup

        raise RuntimeError(escape(f"comm run {record.id} ended {record.status}: {record.error}"))
    stored = store_fits(record, stored_by="quick")  # a deliberate `bench comm` fit is not overwritten
    ctx.log(f"comm: {summary(record.metrics)}" + (f"; fits stored in {stored}" if stored else ""))


def summary(metrics: dict) -> str:
    """Per operator the busbw at 1 MiB and at the largest size, and the fit."""
    parts = []
    for op, fit in metrics["fits"].items():
        rows = [r for r in metrics["rows"] if r["op"] == op]
        by_size = {r[mn.SIZE_BYTES]: r for r in rows if r["placement"] == rows[0]["placement"]}  # as the fit
        mid = min(by_size, key=lambda s: abs(s - 2**20))
        top = max(by_size)
        parts.append(f"{op} busbw {by_size[mid][mn.BUSBW_BYTES_PER_S] / 1e9:.2f} GB/s at {mid / 2**20:.2g} MiB, "
                     f"{by_size[top][mn.BUSBW_BYTES_PER_S] / 1e9:.2f} GB/s at {top / 2**20:.3g} MiB, "
                     f"alpha {fit[mn.ALPHA_S] * 1e6:.0f} us, fit error {fit[mn.FIT_ERROR]:.0%}")
    return "; ".join(parts) + f"; avg busbw {metrics[mn.AVG_BUSBW_BYTES_PER_S] / 1e9:.2f} GB/s"


def quick_steps() -> list[QuickStep]:
    return [QuickStep("comm", "2-process gloo all-reduce, all-gather and reduce-scatter, 1 KiB to 32 MiB", _comm)]
