"""Cold `llmdissect estimate ... --json` wall time (target: under 0.5 s on the 2-core CI box).

Each run is a fresh Python process, as a user's shell would start it; `llmdissect --help` is
timed beside it, in the same run, as the floor every command pays (Python, typer, rich).
Wall time depends on what else runs on the cores (the load average is printed); CPU time
(user + system of the process) much less.

    python benchmarks/bench_estimate.py [--runs 7]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ESTIMATE = ["estimate", "pretrain", "--model", "llama2-70b", "--hardware", "8xa800", "--zero", "3",
            "--offload", "optimizer", "--recompute", "full", "--seq", "4096", "--json"]


def cold_s(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one fresh `llmdissect` process. CPU time
    is what the command costs; wall time adds waiting for the cores on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "llmdissect", *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"llmdissect {' '.join(args)} failed: {proc.stderr.strip()}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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
    wall = [w for w, _ in est]
    out = {"estimate_json_cold_median_s": statistics.median(wall), "estimate_json_cold_min_s": min(wall),
           "estimate_json_cpu_median_s": statistics.median(c for _, c in est),
           "help_cold_median_s": statistics.median(w for w, _ in help_),
           "help_cpu_median_s": statistics.median(c for _, c in help_),
           "load_average_1min": os.getloadavg()[0], "target_s": 0.5, "runs": runs,
           "meets_target": statistics.median(wall) < 0.5}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
