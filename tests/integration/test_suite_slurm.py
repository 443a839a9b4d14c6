"""`--executor slurm`: the generated job scripts, checked and then really executed here (with
stand-ins for sbatch, srun and scontrol) as if on two hosts (two state folders, no shared
store: each job writes a per-job record file), merged into one store; and concurrent
writers into one store."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import run_cli

SUITE = """\
suite: cluster
entries:
  - kind: pretrain
    name: one-node
    model: debug-llama
    seq: 32
    steps: 1
    warmup: 0
  - kind: estimate
    name: estimate
    workload: pretrain
    model: llama2-13b
    hardware: 8x4090
  - kind: pretrain
    name: two-nodes
    model: debug-llama
    seq: 32
    steps: 1
    warmup: 0
    nnodes: 2
    timeout: 240
"""


def shim(folder: Path, name: str, body: str) -> None:
    p = folder / name
    p.write_text("#!/bin/bash\n" + body)
    p.chmod(0o755)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    try:
        return [json.loads(r[0]) for r in con.execute("SELECT record_json FROM runs ORDER BY rowid")]
    finally:
        con.close()


@pytest.mark.slow
def test_slurm_scripts_generated_submitted_and_run(tmp_path, db_path):
    suite = tmp_path / "cluster.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "jobs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # sbatch stand-in: remembers what it was given, answers like `sbatch --parsable`
    shim(bin_dir, "sbatch", f'echo "$@" >> {tmp_path}/sbatch.log\n'
                            f'echo "$((1000 + $(wc -l < {tmp_path}/sbatch.log)));c1"\n')
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = run_cli("run", str(suite), "--db", str(db_path), "--executor", "slurm", "--slurm-dir", str(out),
                   "--slurm-opt=--partition=debug", "--json", env=env, check=True)
    doc = json.loads(proc.stdout)
    assert doc["jobs"] == ["1001", "1002", "1003"]
    plan = json.loads(run_cli("run", str(suite), "--plan", "--json", "--db", str(db_path), check=True).stdout)
    keys = {p["name"]: p["key"] for p in plan["metrics"]["points"]}
    scripts = {Path(s).name: Path(s).read_text() for s in doc["scripts"]}
    assert set(scripts) == {f"point-{k}.sbatch" for k in keys.values()}
    assert json.loads((out / "jobs.json").read_text()) == dict(zip(scripts, doc["jobs"]))
    for name, key in keys.items():
        text = scripts[f"point-{key}.sbatch"]
        assert text.startswith("#!/bin/bash\n#SBATCH --job-name=") and "#SBATCH --partition=debug" in text
        assert f"--point {key}" in text and f"--records-dir {out.resolve()}" in text and "--resume" in text
        assert "--db" not in text  # a job on another host never writes the shared store
        assert f"#SBATCH --nodes={2 if name == 'two-nodes' else 1}" in text
    two = scripts[f"point-{keys['two-nodes']}.sbatch"]
    assert "srun --nodes=2 --ntasks-per-node=1" in two and "scontrol show hostnames" in two
    assert '--rdzv-endpoint "$LLMDISSECT_RDZV_ENDPOINT" --node-rank "$SLURM_NODEID"' in two
    assert "SLURM_JOB_ID" in two  # one rendezvous port per job
    assert "#SBATCH --time=14" in two  # its 240 s timeout + 10 minutes of slack
    assert not db_path.exists() or records(db_path) == []  # dispatch itself runs nothing

    # the jobs, run here as if on two hosts (each its own state folder): the one-node and estimate
    # jobs at once, then the two-node job with srun starting one task per "node" on this machine
    shim(bin_dir, "scontrol", "echo 127.0.0.1\necho 127.0.0.2\n")
    shim(bin_dir, "srun", 'for i in $(seq 0 $((${SLURM_NNODES:-2} - 1))); do SLURM_NODEID=$i "${@: -3}" & done\n'
                          "wait\n")
    job_env = {**os.environ, **env, "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
               "LLMDISSECT_RDZV_PORT": str(free_port())}
    host = {"one-node": "host-a", "estimate": "host-b", "two-nodes": "host-a"}
    jobs = [subprocess.Popen(["bash", str(out / f"point-{keys[n]}.sbatch")],
                             env={**job_env, "LLMDISSECT_HOME": str(tmp_path / host[n])},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for n in ("one-node", "estimate")]
    for j in jobs:
        assert j.wait(timeout=300) == 0, j.stdout.read()[-3000:]
    assert records(db_path) == []  # the jobs wrote their own files, not the store
    # merged while the two-node job has not run yet, then again after it (and once more: idempotent)
    first = json.loads(run_cli("results", "import", str(out), "--db", str(db_path), "--json", check=True).stdout)
    assert (first["files"], first["records"], first["added"]) == (2, 2, 2)
    two_nodes = subprocess.run(["bash", str(out / f"point-{keys['two-nodes']}.sbatch")],
                               env={**job_env, "LLMDISSECT_HOME": str(tmp_path / host["two-nodes"])},
                               capture_output=True, text=True, timeout=400)
    assert two_nodes.returncode == 0, two_nodes.stdout[-3000:] + two_nodes.stderr[-3000:]
    for added in (1, 0):
        again = json.loads(run_cli("results", "import", str(out), "--db", str(db_path), "--json", check=True).stdout)
        assert (again["files"], again["records"], again["added"]) == (3, 3, added)
    got = records(db_path)
    assert sorted(r["config"]["suite_point"] for r in got) == sorted(keys.values())  # each exactly once
    by_name = {r["config"]["suite_entry"]: r for r in got}
    assert all(r["status"] == "ok" for r in got), [(r["config"]["suite_entry"], r["error"]) for r in got]
    assert by_name["two-nodes"]["metrics"]["world_size"] == 2 and by_name["two-nodes"]["config"]["nnodes"] == 2
    # dispatching again finds nothing left to run
    again = json.loads(run_cli("run", str(suite), "--db", str(db_path), "--executor", "slurm", "--slurm-dir",
                               str(out), "--no-submit", "--json", env=env, check=True).stdout)
    assert again["scripts"] == [] and again["recorded"] == 3


WRITER = """
import sys
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store
with open_store(sys.argv[1]) as store:
    for i in range(int(sys.argv[3])):
        store.add(RunRecord(kind="estimate", source="estimated", suite="w", config={"writer": sys.argv[2], "i": i}))
"""


def test_concurrent_writers_lose_nothing(tmp_path, db_path):
    from llmdissect.results.store import open_store

    open_store(db_path).close()  # created first, as `run --executor slurm` does before submitting
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(db_path), str(w), "60"]) for w in range(4)]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    got = records(db_path)
    assert len(got) == 240 and len({r["id"] for r in got}) == 240
    assert sorted((r["config"]["writer"], r["config"]["i"]) for r in got) == \
        sorted((str(w), i) for w in range(4) for i in range(60))


def test_dispatching_again_merges_the_finished_jobs_first(tmp_path, db_path):
    suite = tmp_path / "two.yaml"
    suite.write_text("suite: two\nentries:\n  - kind: estimate\n    workload: pretrain\n    model: llama2-7b\n"
                     "    hardware: 8xa800\n    grid:\n      zero: [0, 3]\n")
    out = tmp_path / "jobs"
    args = ("run", str(suite), "--db", str(db_path), "--executor", "slurm", "--slurm-dir", str(out), "--no-submit",
            "--json")
    first = json.loads(run_cli(*args, check=True).stdout)
    assert len(first["scripts"]) == 2
    job = subprocess.run(["bash", first["scripts"][0]], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LLMDISSECT_HOME": str(tmp_path / "other-host")})
    assert job.returncode == 0, job.stderr[-2000:]
    second = json.loads(run_cli(*args, check=True).stdout)
    assert len(second["scripts"]) == 1 and second["recorded"] == 1  # the finished job was merged, not resubmitted
    assert len(records(db_path)) == 1
