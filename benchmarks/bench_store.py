"""Results-store write rate and losses: 1 and 8 writer processes into one store, SQLite file
and PostgreSQL server, every record checked afterwards (none lost, none duplicated).

Each writer is its own process, opens the store, says it is ready and waits; the clock
starts when all are told to go and stops when the last one has committed its last record
(one transaction per record, as a run writes them). records/s = writers x records / that
time. PostgreSQL: `--postgres URL` uses a server you give (each case gets a new database,
so the role needs CREATEDB), else one is started here from Debian's `postgresql` package
(tests/postgres_server.py, PostgreSQL's default durability, fsync on).

    python benchmarks/bench_store.py [--records 500] [--writers 1,8] [--postgres URL] [--json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/postgres_server.py

WRITER = """
import sys
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store
where, writer, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(where)
records = [RunRecord(kind="estimate", source="estimated", suite="bench", config={"writer": writer, "i": i},
                     metrics={"tokens_per_s": float(i)}).finish("ok") for i in range(n)]
print("ready", flush=True)
sys.stdin.readline()
for record in records:
    store.add(record)
store.close()
"""


def run_case(where: str, writers: int, records: int) -> dict:
    """Start the writers, time them from `go` to the last commit, check every record."""
    from llmdissect.results.store import open_store

    open_store(where).close()  # the tables exist before the clock starts
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, where, str(w), str(records)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for w in range(writers)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise SystemExit(f"a writer did not start (exit {p.wait()})")
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - t0
    if any(codes):
        raise SystemExit(f"writers exited with {codes}")
    with open_store(where) as store:
        got = [(r.config["writer"], r.config["i"]) for r in store.query(suite="bench")]
    expected = {(str(w), i) for w in range(writers) for i in range(records)}
    return {"writers": writers, "records": writers * records, "seconds": round(elapsed, 3),
            "records_per_s": round(writers * records / elapsed, 1),
            "lost": len(expected - set(got)), "duplicated": len(got) - len(set(got))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500, help="records per writer [500]")
    ap.add_argument("--writers", default="1,8", help="writer counts to run [1,8]")
    ap.add_argument("--postgres", help="a server URL to use instead of starting one")
    ap.add_argument("--no-postgres", action="store_true", help="SQLite only")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    counts = [int(n) for n in args.writers.split(",")]
    rows, server = [], None
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        for n in counts:
            rows.append({"store": "sqlite", **run_case(str(Path(tmp) / f"w{n}.db"), n, args.records)})
        if not args.no_postgres:
            import psycopg

            if args.postgres:
                base = args.postgres
            else:
                from tests.postgres_server import start_postgres

                server = start_postgres(durable=True)
                base = server.url()
            try:
                for n in counts:
                    name = f"bench_store_{n}_{int(time.time())}"
                    with psycopg.connect(base, autocommit=True) as conn:
                        conn.execute(f"CREATE DATABASE {name}")
                    url = base.rsplit("/", 1)[0] + f"/{name}"
                    rows.append({"store": "postgresql", **run_case(url, n, args.records)})
                    with psycopg.connect(base, autocommit=True) as conn:
                        conn.execute(f"DROP DATABASE {name}")
            finally:
                if server:
                    server.stop()
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'store':<11} {'writers':>7} {'records':>8} {'seconds':>8} {'records/s':>10} {'lost':>5} {'dup':>4}")
        for r in rows:
            print(f"{r['store']:<11} {r['writers']:>7} {r['records']:>8} {r['seconds']:>8.2f} "
                  f"{r['records_per_s']:>10.0f} {r['lost']:>5} {r['duplicated']:>4}")
    if any(r["lost"] or r["duplicated"] for r in rows):
        raise SystemExit("records were lost or duplicated")


if __name__ == "__main__":
    main()
