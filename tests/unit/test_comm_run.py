"""Checking a `bench comm` request before launching, the run summary, and the profile entry."""
import json

import pytest

from llmdissect.errors import UserError
from llmdissect.micro.comm_launch import CommRequest, add_summary, build_config, store_fits
from llmdissect.results.schema import RunRecord


def test_build_config_defaults_to_gloo_on_this_machine():
    config = build_config(CommRequest(ops="all_reduce,send_recv", max_bytes="1M", nproc=3))
    assert config["backend"] == "gloo" and config["hardware"] == "cpu"
    assert config["ops"] == ["all_reduce", "send_recv"] and config["world_size"] == 3
    assert (config["min_bytes"], config["max_bytes"]) == (1024, 2**20)
    assert "check_offset" not in config
    assert (config["min_time_s"], config["max_iters"]) == (0.0, 100)  # max_iters defaults to 5 x iters
    hooked = build_config(CommRequest(hooks={"check_offset": 1.0, "die_rank": None, "other": 1}))
    assert hooked["check_offset"] == 1.0 and "die_rank" not in hooked and "other" not in hooked


@pytest.mark.parametrize("req, fragment", [
    (CommRequest(min_bytes="1M", max_bytes="1K"), "above --max-bytes"),
    (CommRequest(ops="all_reduce,bogus"), "unknown operator 'bogus'"),
    (CommRequest(dtype="fp8"), "unsupported dtype"),
    (CommRequest(iters=0), "--iters"),
    (CommRequest(nproc=1), "at least 2 processes"),
    (CommRequest(nproc=1, nnodes=2), "--rdzv-endpoint"),
    (CommRequest(nnodes=2, node_rank=2, rdzv_endpoint="h:1"), "process layout"),
    (CommRequest(backend="mpi"), "unknown backend"),
    (CommRequest(backend="nccl"), "nccl needs CUDA"),
    (CommRequest(max_bytes="64G"), "memory"),
    (CommRequest(factor=1.0), "factor"),
    (CommRequest(min_time_s=-1.0), "--min-time-s"),
    (CommRequest(iters=10, max_iters=5), "max-iters >= --iters"),
    (CommRequest(min_time_s=0.1, warmup=0), "needs --warmup 1"),
])
def test_bad_requests_are_user_errors(req, fragment):
    with pytest.raises(UserError, match=fragment.replace("-", r"\-").replace("(", r"\(")):
        build_config(req)


def _row(op, size, t):
    return {"op": op, "placement": "in-place", "size_bytes": size, "busbw_bytes_per_s": size / t,
            "time_s": {"median": t}}


def test_summary_and_profile_entries(tmp_path):
    config = build_config(CommRequest(ops="all_reduce,broadcast"))
    rows = [_row("all_reduce", s, 1e-4 + s / 1e9) for s in (1024, 2**20, 2**24)] + [_row("broadcast", 1024, 1e-4)]
    record = RunRecord(kind="comm", config=config, metrics={"rows": rows}).finish("ok")
    add_summary(record.metrics)
    assert record.metrics["avg_busbw_bytes_per_s"] == pytest.approx(sum(r["busbw_bytes_per_s"] for r in rows) / 4)
    assert set(record.metrics["fits"]) == {"all_reduce"}  # broadcast has one size only
    path = tmp_path / "calibration.json"
    store_fits(record, path)
    entry = json.loads(path.read_text())["collectives"]["gloo"]["all_reduce"]
    assert entry["alpha_s"] == pytest.approx(1e-4) and entry["beta_s_per_byte"] == pytest.approx(1e-9)
    assert (entry["nproc"], entry["link"], entry["record_id"]) == (2, "intra-node", record.id)
    # the quick suite's way: a deliberate fit is left alone ...
    record.metrics["fits"]["all_reduce"]["alpha_s"] = 5.0
    assert store_fits(record, path, stored_by="quick") is None
    assert json.loads(path.read_text())["collectives"]["gloo"]["all_reduce"]["alpha_s"] == pytest.approx(1e-4)
    # ... but its own fit from an earlier quick run is replaced by the new one
    quick_path = tmp_path / "quick.json"
    store_fits(record, quick_path, stored_by="quick")
    record.metrics["fits"]["all_reduce"]["alpha_s"] = 7.0
    assert store_fits(record, quick_path, stored_by="quick") == quick_path
    assert json.loads(quick_path.read_text())["collectives"]["gloo"]["all_reduce"]["alpha_s"] == 7.0
    failed = RunRecord(kind="comm", config=config, metrics={"fits": record.metrics["fits"]}).finish("failed", "x")
    assert store_fits(failed, tmp_path / "other.json") is None and not (tmp_path / "other.json").exists()
