"""Cold `llmdissect estimate ... --json` wall time (target: under 0.5 s on the 2-core CI box).

Each run is a fresh Python process, as a user's shell would start it; `llmdissect --help` is
timed beside it, in the same run, as the floor every command pays (Python, typer, rich).

    python benchmarks/bench_estimate.py [--runs 7]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ESTIMATE = ["estimate", "pretrain", "--model", "llama2-70b", "--hardware", "8xa800", "--zero", "3",
            "--offload", "optimizer", "--recompute", "full", "--seq", "4096", "--json"]


def cold_s(args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "llmdissect", *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"llmdissect {' '.join(args)} failed: {proc.stderr.strip()}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "results.db")
        cold_s([*ESTIMATE, "--db", db])  # warm the OS file cache once; every timed run is a new process
        est, help_ = [], []
        for _ in range(runs):
            est.append(cold_s([*ESTIMATE, "--db", db]))
            help_.append(cold_s(["--help"]))
    out = {"estimate_json_cold_median_s": statistics.median(est), "estimate_json_cold_min_s": min(est),
           "help_cold_median_s": statistics.median(help_), "target_s": 0.5, "runs": runs,
           "meets_target": statistics.median(est) < 0.5}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
