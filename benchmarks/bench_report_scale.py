"""Cost of reading a growing store: `report`, `validate`, `compare` and `results list` at 1k,
10k and 100k records (by default), each timed as a user runs it (a fresh `llmdissect`
process), with its peak resident memory (the child's ru_maxrss).

The records are copies of real ones (a quick-suite run: tests/fixtures/quick_records.jsonl,
or the records of `--from DB`) with distinct ids and seeds, one minute apart, times moved
by up to 3 % (tests/replicate.py), so every configuration repeats as in nightly runs.
`compare --since` compares the first half of the records' time range against the second.
Growth per 10x = time at 10n / time at n.

    python benchmarks/bench_report_scale.py [--sizes 1000,10000,100000] [--from DB] [--keep DIR]
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/replicate.py

BATCH = 2000


def fill(db: Path, base: list[dict], n: int) -> None:
    from llmdissect.results.store import open_store
    from replicate import copies

    with open_store(db) as store:
        batch = []
        for r in copies(base, n):
            batch.append(r)
            if len(batch) == BATCH:
                store.add_new(batch)
                batch = []
        store.add_new(batch)


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds, peak resident MiB, exit status) of `llmdissect ARGS` in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "llmdissect", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode()
    if proc.returncode:
        print(f"  {' '.join(args[:2])} exited {proc.returncode}: {err.strip()[-300:]}", file=sys.stderr)
    return seconds, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--from", dest="source", type=Path, help="A store of real runs to copy (default: the fixture).")
    ap.add_argument("--keep", type=Path, help="Keep the stores and reports in this folder.")
    opts = ap.parse_args()
    from replicate import START, base_records

    if opts.source:
        from llmdissect.results.store import open_existing

        with open_existing(opts.source) as store:
            base = [r.to_dict() for r in store.query()]
    else:
        base = base_records()
    sizes = [int(s) for s in opts.sizes.split(",")]
    work = opts.keep or Path(tempfile.mkdtemp(prefix="bench-report-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LLMDISSECT_HOME": str(work / "home")}
    print(f"{len(base)} real record(s) copied; times of a fresh `llmdissect` process; peak = its max RSS")
    print(f"{'records':>8} {'command':<13} {'seconds':>8} {'peak MiB':>9} {'growth/10x':>10}")
    previous: dict[str, tuple[int, float]] = {}
    try:
        for n in sizes:
            db = work / f"store-{n}.db"
            t0 = time.perf_counter()
            fill(db, base, n)
            print(f"{n:>8} {'(fill)':<13} {time.perf_counter() - t0:>8.1f}")
            middle = (START.timestamp() + n * 30)
            half = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle))
            commands = {"report": ["report", "--db", str(db), "-o", str(work / f"report-{n}")],
                        "validate": ["validate", "--db", str(db)],
                        "compare": ["compare", "--db", str(db), "--since", half],
                        "results list": ["results", "list", "--db", str(db)]}
            for name, args in commands.items():
                seconds, peak, _ = timed(args, env)
                growth = ""
                if name in previous:
                    m, s = previous[name]
                    growth = f"{(seconds / s) ** (1 / math.log10(n / m)):.2f}x"
                previous[name] = (n, seconds)
                print(f"{n:>8} {name:<13} {seconds:>8.1f} {peak:>9.0f} {growth:>10}", flush=True)
            if not opts.keep:
                db.unlink()
                for extra in (Path(f"{db}-wal"), Path(f"{db}-shm")):
                    extra.unlink(missing_ok=True)
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
