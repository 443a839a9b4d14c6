"""Configurations evaluated per second by `advise` (target: >= 100,000/s on the 2-core box).

Times the vectorized search itself (grid building, memory and time of every configuration,
fit masks) for llama2-70b on 8xa800: once at the size `advise` searches, once tiled to about
a million configurations (where fixed costs no longer count). Median of `--runs`.

    python benchmarks/bench_advise.py [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from llmdissect.perfmodel.advise import infer_space, pareto_front, ranking, train_space
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.specs import get_model, resolve_platform


def rate(fn, runs: int) -> tuple[float, int]:
    samples, n = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        space = fn()
        order = ranking(space, "throughput")
        r = space.results
        pareto_front(r["tokens_per_s"][order], r["total_bytes"][order])
        samples.append(time.perf_counter() - t0)
        n = len(space)
    return n / statistics.median(samples), n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    m = get_model("llama2-70b")
    mach = machine_for(resolve_platform("8xa800"), "bf16")
    out = {}
    for label, fn in [
        ("pretrain", lambda: train_space("pretrain", m, mach, 4096, 2)),
        ("finetune", lambda: train_space("finetune", m, mach, 4096, 2)),
        ("infer", lambda: infer_space(m, mach, 512, 128, 2)),
        ("pretrain_x100", lambda: train_space("pretrain", m, mach, 4096, 2, repeat=100)),
    ]:
        r, n = rate(fn, runs)
        out[label] = {"configs": n, "configs_per_s": round(r)}
    out["target_configs_per_s"] = 100_000
    out["meets_target"] = all(v["configs_per_s"] >= 100_000 for k, v in out.items()
                              if isinstance(v, dict) and v["configs"] >= 5000)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
