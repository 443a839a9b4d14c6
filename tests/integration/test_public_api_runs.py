"""`llmdissect.bench` as a notebook runs it: real child processes on debug-llama, the records
they return, the store, and runs that end badly (a record, not an exception)."""
from __future__ import annotations

import socket

import pandas as pd
import pytest

import llmdissect
from llmdissect.errors import UserError

TRAIN = dict(model="debug-llama", seq=32, steps=2, warmup=1, device="cpu")
INFER = dict(model="debug-llama", input_len=8, output_len=3, warmup=1, repeats=1, device="cpu")


@pytest.mark.slow
def test_pretrain_returns_an_ok_record_and_stores_it(db_path):
    record = llmdissect.bench.pretrain(**TRAIN, db=db_path)
    assert (record.kind, record.source, record.status) == ("pretrain", "measured", "ok"), record.error
    m = record.metrics
    assert m["step_time_s"]["n"] == 2 and m["step_time_s"]["median"] > 0 and m["tokens_per_s"] > 0
    assert record.config["model"] == "debug-llama" and record.config["engine"] == "single"

    df = llmdissect.results.load(db_path, kind="pretrain")
    assert isinstance(df, pd.DataFrame) and df["id"].tolist() == [record.id]
    assert df.loc[0, "status"] == "ok"
    assert df.loc[0, "metrics.step_time_s.median"] == pytest.approx(m["step_time_s"]["median"])


@pytest.mark.slow
def test_infer_grid_returns_one_record_per_point(db_path):
    """A grid goes on past a point this device cannot run: that one is a skipped record."""
    records = llmdissect.bench.infer(**INFER, quant=["none", "int4-weight"], db=db_path)
    assert [(r.kind, r.config["quant"], r.status) for r in records] == [("infer", "none", "ok"),
                                                                        ("infer", "int4-weight", "skipped")]
    assert records[0].metrics["ttft_s"]["median"] > 0 and "CUDA" in records[1].error
    df = llmdissect.results.load(db_path, kind="infer")
    assert sorted(df["id"]) == sorted(r.id for r in records)
    assert df.set_index("id").loc[records[0].id, "metrics.ttft_s.median"] == records[0].metrics["ttft_s"]["median"]


@pytest.mark.slow
def test_a_run_past_its_time_limit_is_a_timeout_record_not_an_exception(db_path):
    record = llmdissect.bench.pretrain(**TRAIN, timeout_s=0.5, db=db_path)
    assert record.status == "timeout" and record.error
    assert llmdissect.results.load(db_path, status="timeout")["id"].tolist() == [record.id]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_against_an_unreachable_server_stores_a_failed_record_and_raises(db_path):
    """As `bench serve` does: the failed record is stored, then exit 2 (here: UserError)."""
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(UserError, match="cannot reach") as info:
        llmdissect.bench.serve(base_url=url, num_prompts=2, api_key="secret", db=db_path)
    record = info.value.record
    assert (record.kind, record.status) == ("serve", "failed") and record.config["base_url"] == url
    stored = llmdissect.results.load(db_path, kind="serve")
    assert stored["id"].tolist() == [record.id] and stored.loc[0, "status"] == "failed"
    assert "secret" not in record.to_json()
