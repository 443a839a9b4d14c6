"""From a command's arguments to a dissect plan: by name only, the run arguments left out,
the same validated TrainConfig as `bench`, bad input one UserError line."""
import pytest

from llmdissect.errors import UserError


def test_config_options_by_name():
    from llmdissect.cli.options import config_options

    args = {"model": "debug-llama", "compile_": True, "timeout": 5.0, "db": None, "seq": 16}
    assert config_options(args, {"timeout", "db"}) == {"model": "debug-llama", "compile": True, "seq": 16}


def test_train_plan_is_the_bench_config_in_one_process(tmp_path):
    from llmdissect.workloads.dissect_launch import TRAIN_TARGET, plan_for
    from llmdissect.workloads.train_config import record_config
    from llmdissect.workloads.train_launch import prepare

    options = dict(model="debug-llama", seq=16, grad_accum=2, lr=0.01, device="cpu", compile=False)
    plan = plan_for("pretrain", profile_steps=2, trace=tmp_path / "t.json", **options)
    cfg = prepare("pretrain", steps=1, **options)
    assert plan.target == TRAIN_TARGET and plan.child_config["train"] == cfg.model_dump()
    assert plan.child_config["trace"] == str((tmp_path / "t.json").resolve())
    assert plan.record_config == {"what": "dissect", "workload": "pretrain", **record_config(cfg), "profile_steps": 2}


@pytest.mark.parametrize("workload,options,fragment", [
    ("pretrain", dict(profile_steps=0), "--profile-steps"),
    ("pretrain", dict(profile_steps=1, nnodes=2, rdzv_endpoint="127.0.0.1:29500"), "one node"),
    ("pretrain", dict(profile_steps=1, nproc=2, engine="deepspeed"), "DeepSpeed"),
    ("finetune", dict(profile_steps=1, method="dora"), "--method"),
    ("pretrain", dict(profile_steps=1, no_such_option=1), "--no-such-option"),
    ("infer", dict(profile_steps=1, batch=0, input_len=1, output_len=1, cache="dynamic", quant="none"), "--batch")])
def test_bad_options_are_one_user_error(workload, options, fragment):
    from llmdissect.workloads.dissect_launch import plan_for

    extra = {} if workload == "infer" else {"device": "cpu"}
    with pytest.raises(UserError, match=fragment):
        plan_for(workload, model="debug-llama", **extra, **options)
