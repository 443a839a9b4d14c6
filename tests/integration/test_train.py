"""Measured training on debug-llama: every engine and ZeRO stage with 2 processes, each
fine-tuning method, recomputation, and the properties that show the engines really train."""
import json
import sys

import pytest

from conftest import assert_user_error, run_cli

TINY = ["--model", "debug-llama", "--seq", "64", "--steps", "3", "--warmup", "1"]


def bench(db, *args: str, kind: str = "pretrain", timeout: float = 300) -> dict:
    proc = run_cli("bench", kind, *TINY, *args, "--db", str(db), "--json", timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)
    assert record["status"] == "ok" and record["source"] == "measured" and record["kind"] == kind
    return record


def check_training_metrics(m: dict) -> None:
    for phase in ("step_time_s", "forward_s", "backward_s", "optimizer_s"):
        assert m[phase]["n"] == 3 and m[phase]["median"] > 0
    assert m["tokens_per_s"] == pytest.approx(m["tokens_per_step"] / m["step_time_s"]["median"])
    assert m["peak_memory_bytes"] > 0 and m["peak_rss_bytes"] > m["peak_memory_bytes"]
    assert m["loss"][-1] < m["loss"][0]  # a fixed batch: the loss must fall
    assert m["model_flops_per_token"] > 0 and m["first_step_s"] > 0


@pytest.mark.slow
def test_engines_and_zero_stages_agree_on_first_loss(db_path):
    single = bench(db_path, "--micro-batch", "2")["metrics"]
    check_training_metrics(single)
    runs = {
        "ddp zero0": ["--engine", "ddp", "--zero", "0"],
        "ddp zero1": ["--zero", "1"],
        "fsdp zero2": ["--zero", "2"],
        "fsdp zero3 offload": ["--zero", "3", "--offload", "params"],
    }
    for name, args in runs.items():
        record = bench(db_path, "--micro-batch", "1", "--nproc", "2", *args)
        m = record["metrics"]
        check_training_metrics(m)
        assert m["world_size"] == 2 and m["tokens_per_step"] == single["tokens_per_step"], name
        # one seed, one global batch: the first loss is the same on every engine
        assert m["loss"][0] == pytest.approx(single["loss"][0], rel=1e-5), name
        assert m["loss"][1] == pytest.approx(single["loss"][1], rel=1e-3), name
    assert record["config"]["engine"] == "fsdp" and record["config"]["zero"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_lora_methods_train_only_adapters(db_path, method):
    m = bench(db_path, "--method", method, "--lora-rank", "4", kind="finetune")["metrics"]
    check_training_metrics(m)
    assert m["trainable_params"] == m["peft_trainable_params"] > 0
    assert m["trainable_params"] < m["total_params"] / 10
    assert m["frozen_params_with_grad"] == 0
    assert m["optimizer_state_params"] == m["trainable_params"]
    # LoRA's frozen base costs 4 N, not 6 N
    assert m["model_flops_per_token"] < 6 * 157_696 + 12 * 2 * 64 * 64


def test_full_finetune_trains_everything(db_path):
    m = bench(db_path, "--method", "full", kind="finetune")["metrics"]
    assert m["trainable_params"] == m["total_params"] == m["optimizer_state_params"]


@pytest.mark.slow
def test_recompute_lowers_peak_memory(db_path):
    args = ["--micro-batch", "4", "--seq", "192", "--attn", "eager"]
    peaks = {mode: bench(db_path, *args, "--recompute", mode)["metrics"]["peak_memory_bytes"]
             for mode in ("none", "selective", "full", "op")}
    assert peaks["full"] < peaks["selective"] < peaks["none"], peaks
    assert peaks["full"] < peaks["op"] < peaks["none"], peaks
    assert peaks["full"] < 0.7 * peaks["none"], peaks


def test_memory_limit_is_recorded_as_oom(db_path):
    proc = run_cli("bench", "pretrain", "--model", "tiny-llama", "--micro-batch", "32", "--seq", "512", "--steps", "1",
                   "--warmup", "0", "--max-memory", "2500M", "--db", str(db_path), "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    record = json.loads(proc.stdout)
    assert record["status"] == "oom" and record["error"]
    listed = json.loads(run_cli("results", "list", "--db", str(db_path), "--json", check=True).stdout)
    assert [r["status"] for r in listed] == ["oom"]


def test_bad_training_input(db_path, tmp_path):
    assert_user_error(run_cli("bench", "pretrain", "--zero", "3", "--engine", "ddp"), "--engine fsdp")
    assert_user_error(run_cli("bench", "pretrain", "--attn", "flash", "--device", "cpu"), "flash")
    assert_user_error(run_cli("bench", "pretrain", "--model", "llama2-70b", "--micro-batch", "64"), "needs at least")
    assert_user_error(run_cli("bench", "pretrain", "--model", "debug-llama", "--seq", "100000"), "longer than")
    assert_user_error(run_cli("bench", "pretrain", "--micro-batch", "0"), "--micro-batch")
    assert_user_error(run_cli("bench", "pretrain", "--method", "lora"), "No such option")
    assert_user_error(run_cli("bench", "finetune", "--method", "lora", "--zero", "3"), "single or ddp")
    assert not db_path.exists()


def test_qlora_without_bitsandbytes_is_refused(tmp_path):
    code = ("import sys; sys.modules['bitsandbytes'] = None; sys.argv = ['llmdissect'] + sys.argv[1:]; "
            "from llmdissect.cli.main import run; run()")
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code, "bench", "finetune", "--method", "qlora"],
                          capture_output=True, text=True, timeout=120)
    assert_user_error(proc, "bitsandbytes")


def test_data_file_with_trained_tokenizer(db_path, tmp_path):
    data = tmp_path / "texts.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"the quick brown fox {i} jumps over the lazy dog"})
                              for i in range(50)))
    record = bench(db_path, "--data", str(data))
    assert record["config"]["data"] == str(data)
    assert record["metrics"]["loss"][-1] < record["metrics"]["loss"][0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    proc = run_cli("bench", "pretrain", *TINY, "--data", str(bad), "--db", str(db_path))
    assert proc.returncode == 2 and "not JSON" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--optimizer", "adamw-fused"], ["--optimizer", "adamw-8bit"],
                                  ["--dtype", "bf16", "--seq", "32"], ["--grad-accum", "2"]])
def test_optimizer_dtype_and_accumulation_options_train(db_path, args):
    record = bench(db_path, *args)
    m = record["metrics"]
    assert m["loss"][-1] < m["loss"][0]
    if "--grad-accum" in args:
        assert m["tokens_per_step"] == 2 * 64
    if "bf16" in args:
        assert "default on CPU is" in m["note"] and "fp32" in m["note"]
