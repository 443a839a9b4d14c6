"""How fast `estimate serve` simulates: requests simulated per second (target: 10,000 requests
in under 2 s on one core).

    python benchmarks/bench_serve_sim.py [--requests 10000] [--rate 20] [--profile vllm] [--rounds 3]

The load is llama2-7b on one A100 from the hardware catalogue (no calibration profile, so the
same on every machine): Poisson arrivals, 512-token prompts and 128-token answers. Each round
runs the whole estimate (arrivals, the simulation, the metrics); the median round is printed.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--profile", default="vllm")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from llmdissect.analysis.serve_estimate import run_serve_estimate
    from llmdissect.perfmodel.request import estimate_request

    request = estimate_request("serve", model="llama2-7b", hardware="a100", profile=args.profile,
                               num_prompts=args.requests, request_rate=args.rate, input_len=512, output_len=128)
    times, est = [], None
    for _ in range(args.rounds):
        start = time.perf_counter()
        est = run_serve_estimate(request, calibration=None)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    eng = est.metrics["engine"]
    print(f"{args.requests} requests at {args.rate:g}/s on {args.profile}: {median:.2f} s a round "
          f"(median of {args.rounds}; min {min(times):.2f}, max {max(times):.2f}), "
          f"{args.requests / median:,.0f} requests simulated per second, "
          f"{eng['iterations']:,} iterations, mean batch {eng['mean_batch_size']:.1f}")
    print(f"target 10,000 requests within 2 s: {'met' if args.requests / median >= 5000 else 'missed'}")


if __name__ == "__main__":
    main()
