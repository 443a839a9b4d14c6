"""The collectives in the quick suite, and `bench comm` across two (local) nodes."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from llmdissect.calibration_profile import load_profile
from llmdissect.results import open_store


@pytest.mark.slow
def test_quick_suite_comm_step(db_path: Path):
    proc = run_cli("run", "quick", "--only", "comm", "--db", str(db_path), check=True)
    assert "all_reduce busbw" in proc.stdout + proc.stderr
    with open_store(db_path) as store:
        (record,) = store.query(kind="comm")
    assert record.status == "ok" and record.suite == "quick" and record.config["world_size"] == 2
    ops = ("all_reduce", "all_gather", "reduce_scatter")  # the three DDP, FSDP and ZeRO run
    for op in ops:
        sizes = sorted({r["size_bytes"] for r in record.metrics["rows"] if r["op"] == op})
        assert sizes[0] == 1024 and sizes[-1] == 32 * 2**20 and len(sizes) == 16
    assert set(load_profile()["collectives"]["gloo"]) == set(ops)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_on_one_machine(tmp_path: Path):
    """--nnodes 2 with a c10d rendezvous: two launches of one process each form one group;
    the node that gets global rank 0 reports the rows, the other an empty part."""
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, "-m", "llmdissect", "bench", "comm", "--nproc", "1", "--nnodes", "2",
                               "--node-rank", str(k), "--rdzv-endpoint", endpoint, "--max-bytes", "16K",
                               "--factor", "4", "--iters", "3", "--warmup", "1", "--timeout-s", "120", "--json",
                               "--no-profile", "--db", str(tmp_path / f"node{k}.db")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for k in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    records = [json.loads(o[0]) for o in outs]
    assert all(r["status"] == "ok" and r["config"]["world_size"] == 2 for r in records)
    with_rows = [r for r in records if r["metrics"]["rows"]]
    assert len(with_rows) == 1
    assert [r["size_bytes"] for r in with_rows[0]["metrics"]["rows"]] == [1024, 4096, 16384]
    assert with_rows[0]["env"]["world_size"] == 2
