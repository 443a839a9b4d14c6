"""PyTorch-native data parallelism (DDP, ZeroRedundancyOptimizer, FSDP2) against DeepSpeed
at each ZeRO stage, on one model and one batch, in one run: tokens/s and peak memory.

Usage: python benchmarks/bench_fsdp_vs_deepspeed.py [--model tiny-llama] [--nproc 2] [--seq 128]
       [--steps 5] [--db results.db]
Every run is a real `bench pretrain` (a fresh torchrun child, gloo on CPU); the records go
to --db (default: the state dir's store) so `llmdissect results list` shows them.
Prints a Markdown table: engine, stage, offload, tokens/s, median step, peak tensor memory
(static + step peak, max over ranks), peak RSS, first loss.
"""
from __future__ import annotations

import argparse
import time

# (label, options): ZeRO-0/1 on the PyTorch side are DDP and DDP + ZeroRedundancyOptimizer
RUNS = [
    ("torch DDP", dict(engine="ddp", zero=0)),
    ("deepspeed", dict(engine="deepspeed", zero=0)),
    ("torch DDP+ZeRO-1 optimizer", dict(engine="ddp", zero=1)),
    ("deepspeed", dict(engine="deepspeed", zero=1)),
    ("torch FSDP2", dict(engine="fsdp", zero=2)),
    ("deepspeed", dict(engine="deepspeed", zero=2)),
    ("torch FSDP2", dict(engine="fsdp", zero=3)),
    ("deepspeed", dict(engine="deepspeed", zero=3)),
    ("deepspeed", dict(engine="deepspeed", zero=2, offload="optimizer")),
    ("torch FSDP2", dict(engine="fsdp", zero=3, offload="params")),
    ("deepspeed", dict(engine="deepspeed", zero=3, offload="params")),
]


def main() -> None:
    from llmdissect.results.store import check_writable, open_store
    from llmdissect.workloads.train_launch import prepare, run_training

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    db = check_writable(args.db)
    common = dict(model=args.model, seq=args.seq, micro_batch=1, steps=args.steps, warmup=2, nproc=args.nproc,
                  device="cpu")
    rows = []
    t0 = time.perf_counter()
    with open_store(db) as store:
        for label, opts in RUNS:
            record, _ = run_training(prepare("pretrain", **common, **opts), timeout_s=900)
            store.add(record)
            m = record.metrics or {}
            if record.status != "ok":
                rows.append((label, opts["zero"], opts.get("offload", "none"), record.status, "", "", "", ""))
                continue
            rows.append((label, opts["zero"], opts.get("offload", "none"), f"{m['tokens_per_s']:.0f}",
                         f"{m['step_time_s']['median'] * 1e3:.0f}", f"{m['peak_memory_bytes'] / 2**20:.1f}",
                         f"{m['peak_rss_bytes'] / 2**20:.0f}", f"{m['loss'][0]:.5f}"))
    print(f"{args.model}, {args.nproc} processes (gloo, CPU), micro-batch 1 x seq {args.seq} per process, "
          f"fp32, {args.steps} timed steps after 2 warm-up; records in {db}; {time.perf_counter() - t0:.0f} s\n")
    print("| engine | ZeRO | offload | tokens/s | step ms (median) | peak tensors MiB | peak RSS MiB | first loss |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
