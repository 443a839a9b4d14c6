"""`bench ops` against torch.utils.benchmark on one operator, in one run.

The operator is a 1024 x 1024 x 1024 fp32 matrix product (`F.linear(x, w)`, x [1024, 1024],
w [1024, 1024]) built by `bench ops` itself (micro.ops_cases.linear_case) and timed as
`bench ops` times it (measure_loop, the LoopPolicy of ops_run). torch.utils.benchmark's
Timer times the same tensors with the same thread count (`blocked_autorange`, its median).
The two alternate for several rounds, so that a busy machine slows both alike; the ratio
is the median over rounds of ours / theirs (want: within 5 %).

    python benchmarks/bench_ops_vs_torch_benchmark.py [--rounds 5] [--min-time 0.5]
"""
from __future__ import annotations

import argparse
import statistics


def main() -> int:
    import torch
    import torch.utils.benchmark as tb

    from llmdissect.measure import LoopPolicy, Timer, measure_loop
    from llmdissect.micro.ops_cases import Maker, linear_case

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5, help="Seconds per measurement (each side).")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    n = 1024
    maker = Maker("cpu", torch.float32, seed=1)
    case = linear_case(lambda: maker, "matmul", n, n, n, 4, "fwd")
    fn = case.make()  # what bench ops times: F.linear(x, w) on random fp32 inputs
    x, w = maker.randn(n, n), maker.randn(n, n)  # the same shapes for torch.utils.benchmark
    theirs_timer = tb.Timer(stmt="torch.nn.functional.linear(x, w)", globals={"torch": torch, "x": x, "w": w},
                            num_threads=args.threads, label="1024^3 fp32 matmul")
    policy = LoopPolicy(warmup=2, min_iters=5, min_time_s=args.min_time)
    ours, theirs, ratios = [], [], []
    for r in range(args.rounds):
        a = measure_loop(fn, policy, Timer("cpu")).stats.median
        b = theirs_timer.blocked_autorange(min_run_time=args.min_time).median
        ours.append(a)
        theirs.append(b)
        ratios.append(a / b)
        print(f"round {r + 1}: bench ops {a * 1e3:.2f} ms, torch.utils.benchmark {b * 1e3:.2f} ms, ratio {a / b:.3f}")
    ratio = statistics.median(ratios)
    flops = case.cost.flops
    print(f"threads {args.threads}; median bench ops {statistics.median(ours) * 1e3:.2f} ms "
          f"({flops / statistics.median(ours) / 1e9:.1f} GFLOP/s), torch.utils.benchmark "
          f"{statistics.median(theirs) * 1e3:.2f} ms; ratio (median over rounds) {ratio:.3f}: "
          f"{'within' if abs(ratio - 1) <= 0.05 else 'NOT within'} 5 %")
    return 0 if abs(ratio - 1) <= 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
