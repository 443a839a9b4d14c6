"""The foundation commands as a user runs them: real processes, exit codes, JSON on stdout."""
import json
from pathlib import Path

from conftest import assert_user_error, run_cli
from llmdissect.results import RunRecord, open_store


def test_models_json_gives_exact_llama2_counts():
    proc = run_cli("models", "--json", check=True)
    models = {m["name"]: m for m in json.loads(proc.stdout)}
    assert models["llama2-7b"]["params"] == 6_738_415_616
    assert models["llama2-13b"]["params"] == 13_015_864_320
    assert models["llama2-70b"]["params"] == 68_976_648_192
    assert {"params", "params_matmul", "params_embedding"} <= set(models["tiny-llama"])


def test_models_human_and_hardware():
    assert "llama2-70b" in run_cli("models", check=True).stdout
    out = run_cli("hardware", check=True).stdout
    assert "A800-80G-SXM" in out and "8xa800" in out and "Local CPU" in out
    hw = json.loads(run_cli("hardware", "--json", check=True).stdout)
    assert hw["local_cpu"]["kind"] == "cpu"


def test_bad_inputs_exit_2_with_one_line(tmp_path: Path):
    assert_user_error(run_cli("models", "no-such-model"), "unknown model")
    assert_user_error(run_cli("models", str(tmp_path / "missing" / "config.json")), "not found")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [\n")
    assert_user_error(run_cli("models", str(bad)), "malformed TOML")
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert_user_error(run_cli("run", "quick", "--only", "specs", "--db", str(a_file / "x.db")), "cannot")
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"garbage" * 1000)
    assert_user_error(run_cli("results", "list", "--db", str(corrupt)), "not a llm-dissect results database")
    assert corrupt.read_bytes() == b"garbage" * 1000
    assert_user_error(run_cli("run", "quick", "--db", str(corrupt)), "not a llm-dissect")
    assert corrupt.read_bytes() == b"garbage" * 1000
    assert_user_error(run_cli("run", "nightly"), "unknown suite")


def test_results_list_show_export(db_path: Path, tmp_path: Path):
    with open_store(db_path) as store:
        rid = store.add(RunRecord(kind="pretrain", config={"model": "debug-llama"},
                                  metrics={"tokens_per_s": 12.5}).finish())
    out = run_cli("results", "list", "--db", str(db_path), check=True).stdout
    assert rid in out and "tokens_per_s=12.5" in out
    shown = json.loads(run_cli("results", "show", rid[:6], "--db", str(db_path), "--json", check=True).stdout)
    assert shown["id"] == rid and shown["metrics"]["tokens_per_s"] == 12.5
    listed = json.loads(run_cli("results", "list", "--db", str(db_path), "--json", check=True).stdout)
    assert [r["id"] for r in listed] == [rid]
    for fmt in ("jsonl", "csv", "parquet"):
        run_cli("results", "export", "--db", str(db_path), "--format", fmt, "--out", str(tmp_path / f"x.{fmt}"),
                check=True)
        assert (tmp_path / f"x.{fmt}").stat().st_size > 0
    assert_user_error(run_cli("results", "show", "nope", "--db", str(db_path)), "no run")


def test_db_from_environment(tmp_path: Path):
    db = tmp_path / "env.db"
    run_cli("run", "quick", "--only", "environment,specs", env={"LLMDISSECT_DB": str(db)}, check=True)
    assert db.exists()


def test_run_quick_foundation_steps(db_path: Path):
    proc = run_cli("run", "quick", "--only", "environment,specs", "--db", str(db_path), check=True)
    assert str(db_path) in proc.stdout
    assert "specs" in proc.stdout
