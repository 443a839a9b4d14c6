"""Harness overhead of `bench pretrain`: its reported tokens/s against a bare hand-written
loop of the same model and batch, each in a fresh process with the same thread count,
interleaved round by round (alternating which goes first) so that machine noise hits both alike. Target: ratio >= 0.97.
The harness runs twice a round: as `bench pretrain` starts its child, and forked from a warm
process as the quick suite starts it (`launch.warm`); both ratios must meet the target.

    python benchmarks/bench_train_overhead.py [--model tiny-llama] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from llmdissect.launch import warm
from llmdissect.launch.child import default_threads
from llmdissect.measure.allocator import allocator_env
from llmdissect.workloads.train_launch import prepare, run_training

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    threads = default_threads(1)
    cfg = prepare("pretrain", model=a.model, micro_batch=a.micro_batch, seq=a.seq, steps=a.steps, warmup=a.warmup,
                  device="cpu")
    harness, warmed, bare = [], [], []
    launcher = warm.WarmLauncher(threads)

    def run_harness() -> None:
        with warm.using(None):
            record, _ = run_training(cfg, threads=threads)
        assert record.status == "ok", record.error
        harness.append(record.metrics["tokens_per_s"])

    def run_warm() -> None:
        with warm.using(launcher):
            record, _ = run_training(cfg, threads=threads)
        assert record.status == "ok" and not launcher.failed, record.error
        warmed.append(record.metrics["tokens_per_s"])

    def run_bare() -> None:
        out = subprocess.run([sys.executable, str(HERE / "bare_train_loop.py"), a.model, str(a.micro_batch),
                              str(a.seq), str(a.steps), str(a.warmup), str(threads)],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, **allocator_env()})  # the allocator bench children get
        bare.append(json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_s"])

    launcher.wait_ready()  # its imports are not timed, and do not run during a timed round
    for r in range(a.rounds):
        # rotate which goes first, so that an order effect cannot favour any side
        runs = [run_harness, run_warm, run_bare]
        for run in runs[r % 3:] + runs[:r % 3]:
            run()
        print(f"round {r + 1}: bench pretrain {harness[-1]:.1f} tokens/s, forked from a warm process "
              f"{warmed[-1]:.1f}, bare loop {bare[-1]:.1f} tokens/s")
    launcher.close()
    base = statistics.median(bare)
    print(f"{a.model} mb {a.micro_batch} x seq {a.seq}, {threads} threads: median bench pretrain "
          f"{statistics.median(harness):.1f} tokens/s (ratio {statistics.median(harness) / base:.3f}), forked from "
          f"a warm process {statistics.median(warmed):.1f} (ratio {statistics.median(warmed) / base:.3f}), "
          f"bare loop {base:.1f} tokens/s (target: ratios >= 0.97)")


if __name__ == "__main__":
    main()
