"""Expert parallelism on this machine: `bench pretrain --nproc 2 --ep 2` against plain DDP on
2 processes, same model and global batch, interleaved round by round (alternating which goes
first) so that machine noise hits both alike; next to each measured ratio, the estimate's.

What it shows: what splitting the routed experts saves (memory per process) and costs (the
dispatch and combine all-to-alls), measured and predicted side by side.

    python benchmarks/bench_expert_parallel.py [--model tiny-moe] [--rounds 3]
"""
import argparse
import statistics

import llmdissect.metric_names as mn
from llmdissect.analysis.predict import estimate_measured
from llmdissect.workloads.train_launch import prepare, run_training


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-moe")
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    common = dict(model=a.model, micro_batch=a.micro_batch, seq=a.seq, steps=a.steps, warmup=1, device="cpu",
                  nproc=2)
    runs: dict[int, list] = {1: [], 2: []}
    for r in range(a.rounds):
        for ep in ((1, 2) if r % 2 == 0 else (2, 1)):
            record, _ = run_training(prepare("pretrain", ep=ep, **common), timeout_s=600)
            if record.status != "ok":
                raise SystemExit(f"ep {ep}: {record.status}: {record.error}")
            runs[ep].append(record)
            m = record.metrics
            print(f"round {r + 1} ep {ep}: step {m[mn.STEP_TIME_S]['median'] * 1e3:.1f} ms, "
                  f"peak {m[mn.PEAK_MEMORY_BYTES] / 2**20:.1f} MiB, loss {m['loss'][-1]:.4f}", flush=True)

    def measured(ep: int, key: str) -> float:
        return statistics.median(r.metrics[key]["median"] if key == mn.STEP_TIME_S else r.metrics[key]
                                 for r in runs[ep])

    def predicted(ep: int, key: str) -> float:
        est = estimate_measured("pretrain", runs[ep][0].config).metrics
        return est[mn.TIME][mn.STEP_S] if key == mn.STEP_TIME_S else est[mn.MEMORY][mn.TOTAL_BYTES]

    print(f"\n{a.model}, 2 processes, micro-batch {a.micro_batch} x seq {a.seq}, {a.rounds} rounds (medians)")
    print(f"{'':22s} {'measured ep2/ep1':>17s} {'predicted ep2/ep1':>18s}")
    for key, name in ((mn.STEP_TIME_S, "step time"), (mn.PEAK_MEMORY_BYTES, "memory per process")):
        try:
            pred = f"{predicted(2, key) / predicted(1, key):18.2f}"
        except (KeyError, TypeError):
            pred = f"{'(run `llmdissect peak`)':>18s}"
        print(f"{name:22s} {measured(2, key) / measured(1, key):17.2f} {pred}")


if __name__ == "__main__":
    main()
