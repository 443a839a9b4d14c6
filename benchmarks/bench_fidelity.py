"""How well the estimate predicts this machine: the quick suite N times, its validation each time.

Each round is a fresh `llmdissect run quick` (its own state folder and store, so each round
calibrates, measures and estimates from scratch, as `make run` does), then the validation of
that round's records (what `llmdissect validate --suite quick` prints). Printed per metric:
the number of pairs and the min / median / max MAPE across rounds, with the load average
before each round, and the measurements' own spread: each round's measured values against
their median across rounds (what a model that predicted that median would score; on a
shared machine the floor under the MAPE).

    python benchmarks/bench_fidelity.py [--rounds 3] [--only STEP,...] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def one_round(folder: Path, only: str | None) -> tuple[Any, float, float]:
    """(validation, wall seconds, 1-minute load average before) of one quick run."""
    from llmdissect.analysis.validate import validate_records
    from llmdissect.results.store import open_existing

    load = os.getloadavg()[0]
    env = {**os.environ, "LLMDISSECT_HOME": str(folder / "state")}
    db = folder / "results.db"
    cmd = [sys.executable, "-m", "llmdissect", "run", "quick", "--db", str(db)] + (["--only", only] if only else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run quick failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    os.environ["LLMDISSECT_HOME"] = env["LLMDISSECT_HOME"]  # validate with that round's calibration
    with open_existing(db) as store:
        records = store.query(suite="quick")
    measured = [r for r in records if r.source == "measured" and r.status == "ok"]
    return validate_records(measured, [r for r in records if r.kind == "estimate"]), wall, load


def measured_spread(rounds: list[list[Any]]) -> dict[str, list[float]]:
    """Per metric, each round's MAPE of its measured values against the median of every
    round's measurement of the same pair (kind and label): what an estimate that always
    predicted that median would score, so that an error of the machine's making is told
    apart from one of the model's. Pairs measured in fewer than two rounds are left out."""
    values: dict[tuple[str, str, str], list[float]] = {}
    for pairs in rounds:
        for p in pairs:
            values.setdefault((p.metric, p.kind, p.label), []).append(p.measured)
    medians = {k: statistics.median(v) for k, v in values.items() if len(v) > 1}
    out: dict[str, list[float]] = {}
    for pairs in rounds:
        devs: dict[str, list[float]] = {}
        for p in pairs:
            mid = medians.get((p.metric, p.kind, p.label))
            if mid:
                devs.setdefault(p.metric, []).append(abs(p.measured - mid) / mid)
        for metric, d in devs.items():
            out.setdefault(metric, []).append(sum(d) / len(d))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None, help="Quick-suite steps to run (as `run quick --only`).")
    ap.add_argument("--keep", type=Path, default=None,
                    help="Keep each round's store and state under this folder (round1, ...), for "
                         "`LLMDISSECT_HOME=DIR/roundN/state llmdissect validate --detail --db DIR/roundN/results.db`.")
    args = ap.parse_args()
    per_metric: dict[str, list[float]] = {}
    pairs: dict[str, int] = {}
    every_round: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmdissect-fidelity-") as tmp:
        for i in range(args.rounds):
            folder = (args.keep or Path(tmp)) / f"round{i + 1}"
            folder.mkdir(parents=True, exist_ok=True)
            validation, wall, load = one_round(folder, args.only)
            rows = validation.summary()
            every_round.append(validation.pairs)
            print(f"round {i + 1}/{args.rounds}: {wall:.0f} s, load average before {load:.2f}: "
                  + ", ".join(f"{r['metric']} {r['mape']:.0%}" for r in rows), flush=True)
            for r in rows:
                per_metric.setdefault(r["metric"], []).append(r["mape"])
                pairs[r["metric"]] = r["pairs"]
    spread = measured_spread(every_round)
    print(f"\nMAPE across {args.rounds} round(s) of the quick suite (error = (predicted - measured) / measured);")
    print("spread: the median over rounds of each round's measurements against their median across rounds")
    print(f"{'metric':<26}{'pairs':>6}{'min':>8}{'median':>8}{'max':>8}{'spread':>8}")
    for metric, values in per_metric.items():
        noise = f"{statistics.median(spread[metric]):>8.0%}" if metric in spread else f"{'-':>8}"
        print(f"{metric:<26}{pairs[metric]:>6}{min(values):>8.0%}{statistics.median(values):>8.0%}"
              f"{max(values):>8.0%}{noise}")
    load = os.getloadavg()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = " (above the number of cores: other work shared the machine)" if load[0] > cores else ""
    print(f"load average now: {' '.join(f'{x:.2f}' for x in load)} on {cores} cores{busy}")


if __name__ == "__main__":
    main()
