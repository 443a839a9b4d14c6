"""The public Python API (`llmdissect.estimate`, `llmdissect.bench`, `llmdissect.results.load`)
without launching a child: the same answers as the commands, bad input, a light package root."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

import llmdissect
from llmdissect.errors import UserError

ESTIMATE = dict(model="llama2-70b", hardware="8xa800", zero=3, offload="optimizer", recompute="full", seq=4096,
                grad_accum=8)


def test_import_llmdissect_is_light():
    script = textwrap.dedent("""
        import json, sys
        import llmdissect
        heavy = ("torch", "pandas", "typer", "transformers")
        at_import = sorted(m for m in heavy if m in sys.modules)
        llmdissect.estimate, llmdissect.bench, llmdissect.results.load  # resolving the API stays light too
        record = llmdissect.estimate("infer", model="llama2-7b", hardware="a800", store=False)
        print(json.dumps({"at_import": at_import, "after": sorted(m for m in heavy if m in sys.modules),
                          "kind": record.kind}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"at_import": [], "after": [], "kind": "estimate"}


def test_estimate_returns_the_record_that_the_command_prints(db_path):
    from typer.testing import CliRunner

    from llmdissect.cli.main import app

    args = ["estimate", "pretrain", "--json", "--no-store"]
    for key, value in ESTIMATE.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    cli = json.loads(out.stdout)

    record = llmdissect.estimate("pretrain", **ESTIMATE, db=db_path)
    got = record.to_dict()
    assert (got["kind"], got["source"], got["status"]) == ("estimate", "estimated", "ok")
    assert got["config"] == cli["config"] and got["config"]["kind_estimated"] == "pretrain"
    assert got["metrics"] == cli["metrics"]
    assert got["metrics"]["fits"] is True and 0 < got["metrics"]["mfu"] < 1

    df = llmdissect.results.load(db_path)
    assert isinstance(df, pd.DataFrame) and list(df["id"]) == [record.id]
    assert df.loc[0, "metrics.tokens_per_s"] == pytest.approx(got["metrics"]["tokens_per_s"])
    assert df.loc[0, "config.zero"] == 3
    assert llmdissect.load_results(db_path, kind="estimate")["id"].tolist() == [record.id]  # the older name
    assert llmdissect.results.load(db_path, kind="pretrain").empty


def test_estimate_store_false_writes_nothing(tmp_path):
    db = tmp_path / "r.db"
    record = llmdissect.estimate("finetune", model="llama2-7b", hardware="rtx4090", lora_rank=16, quant="nf4",
                                 store=False, db=db)
    assert record.config["method"] == "qlora" and record.metrics["fits"] is True
    assert not db.exists()


@pytest.mark.parametrize("call, fragment", [
    (lambda db: llmdissect.estimate("pretrain", model="no-such-model", hardware="a800", db=db), "no-such-model"),
    (lambda db: llmdissect.estimate("train", model="llama2-7b", hardware="a800", db=db), "pretrain, finetune"),
    (lambda db: llmdissect.estimate("infer", model="llama2-7b", hardware="a800", seq=128, db=db), "--seq"),
    (lambda db: llmdissect.estimate("infer", model="llama2-7b", hardware="no-gpu", db=db), "no-gpu"),
    (lambda db: llmdissect.bench.pretrain(model="no-such-model", db=db), "no-such-model"),
    (lambda db: llmdissect.bench.pretrain(model="debug-llama", zero=3, engine="ddp", db=db), "--engine fsdp"),
    (lambda db: llmdissect.bench.pretrain(model="debug-llama", micro_batch=0, db=db), "--micro-batch"),
    (lambda db: llmdissect.bench.pretrain(model="debug-llama", max_memory="lots", db=db), "max_memory"),
    (lambda db: llmdissect.bench.finetune(model="debug-llama", method="lora", zero=3, db=db), "single or ddp"),
    (lambda db: llmdissect.bench.infer(model="no-such-model", db=db), "no-such-model"),
    (lambda db: llmdissect.bench.infer(model="debug-llama", batch=[1, 0], db=db), "--batch"),
    (lambda db: llmdissect.bench.infer(model="debug-llama", input_len=1000, output_len=1000, db=db), "exceeds"),
    (lambda db: llmdissect.bench.infer(model="debug-llama", threads=0, device="cpu", db=db), "threads"),
    (lambda db: llmdissect.bench.serve(base_url="localhost:8000", db=db), "http://"),
    (lambda db: llmdissect.bench.serve(base_url="http://127.0.0.1:1", num_prompts=0, db=db), "num_prompts"),
    (lambda db: llmdissect.bench.serve(base_url="http://127.0.0.1:1", sweep_rates="1,fast", db=db), "fast"),
    (lambda db: llmdissect.bench.serve(base_url="http://127.0.0.1:1", slo={"speed": 1}, db=db), "speed"),
])
def test_bad_input_raises_user_error_before_anything_runs(db_path, call, fragment):
    with pytest.raises(UserError) as info:
        call(db_path)
    assert fragment.lower() in str(info.value).lower()
    assert "\n" not in str(info.value)
    assert not db_path.exists()  # refused before the store was touched


def test_single_point_that_cannot_run_here_raises_with_its_record(db_path):
    with pytest.raises(UserError, match="CUDA") as info:
        llmdissect.bench.infer(model="debug-llama", quant="int4-weight", device="cpu", db=db_path)
    record = info.value.record
    assert record.status == "skipped" and record.kind == "infer" and record.config["quant"] == "int4-weight"
    assert llmdissect.results.load(db_path)["id"].tolist() == [record.id]  # stored, as the command does

    with pytest.raises(UserError):
        llmdissect.bench.infer(model="debug-llama", quant="int4-weight", device="cpu", store=False,
                               db=db_path.with_name("other.db"))
    assert not db_path.with_name("other.db").exists()


def _cli_defaults(command) -> dict:
    out = {}
    for name, p in inspect.signature(command).parameters.items():
        default = getattr(p.default, "default", p.default)
        default = inspect.Parameter.empty if default is Ellipsis else default  # required
        out[{"compile_": "compile", "timeout": "timeout_s"}.get(name, name)] = default
    return out


@pytest.mark.parametrize("api_name, cli_module, cli_name", [
    ("pretrain", "train_cmd", "pretrain"), ("finetune", "train_cmd", "finetune"),
    ("infer", "infer_cmd", "infer"), ("serve", "serve_cmd", "bench_serve"),
])
def test_bench_options_and_defaults_are_the_commands(api_name, cli_module, cli_name):
    import importlib

    cli = _cli_defaults(getattr(importlib.import_module(f"llmdissect.cli.{cli_module}"), cli_name))
    sig = inspect.signature(getattr(llmdissect.bench, api_name))
    assert all(p.kind is p.KEYWORD_ONLY for p in sig.parameters.values())
    api = {name: p.default for name, p in sig.parameters.items()}
    assert set(api) - {"store"} == set(cli) - {"json_out"}
    for name, default in api.items():
        if name in ("store", "db", "api_key"):
            continue
        expected = cli[name]
        if name in ("batch", "input_len", "output_len") and isinstance(expected, str):
            expected = int(expected)  # a grid option: "1" on the command line, 1 here
        if name == "request_rate":
            expected, default = float(expected), float(default)
        assert default == expected, (name, default, expected)


def test_estimate_options_are_the_requests():
    from llmdissect.perfmodel.request import EstimateRequest

    sig = inspect.signature(llmdissect.estimate)
    names = [n for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert set(names) - {"calibration", "store", "db"} == set(EstimateRequest.model_fields) - {"kind"}
    for name in names:
        if name in EstimateRequest.model_fields:
            assert sig.parameters[name].default == EstimateRequest.model_fields[name].default or name in (
                "model", "hardware"), name
