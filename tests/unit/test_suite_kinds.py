"""A suite entry's options come from its workload's config: the same names, types, choices
and bounds, except for the differences suites.kinds writes down (and these tests check)."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.micro.collectives import BACKENDS, DTYPES
from llmdissect.micro.comm_config import CommRequest
from llmdissect.perfmodel.request import ANALYTICAL_KINDS as WORKLOADS
from llmdissect.perfmodel.request import POSITIVE, SERVE_ONLY, EstimateRequest
from llmdissect.suites import kinds
from llmdissect.suites.kinds import INT, check_options, infer_defaults, kind_options
from llmdissect.suites.serve_point import SERVER_ONLY, ServePoint, serve_config
from llmdissect.workloads.infer_config import InferPoint
from llmdissect.workloads.serve.serve_config import ServeConfig


def test_every_kind_has_options_or_a_config_that_checks_them():
    assert kinds.KINDS == ("pretrain", "finetune", "infer", "serve", "ops", "comm", "estimate")
    assert [k for k in kinds.KINDS if kind_options(k) is None] == ["pretrain", "finetune", "ops"]


def test_options_are_the_config_fields_less_what_the_suite_fills_in():
    assert list(kind_options("infer")) == [f for f in InferPoint.model_fields if f not in kinds.INFER_EXCLUDED]
    assert list(kind_options("serve")) == list(ServePoint.model_fields)
    assert list(kind_options("comm")) == [f for f in CommRequest.model_fields if f not in kinds.COMM_EXCLUDED]
    assert list(kind_options("estimate")) == ["workload", *(f for f in EstimateRequest.model_fields
                                                            if f != "kind" and f not in SERVE_ONLY)]
    for name in (*kinds.INFER_EXCLUDED, *kinds.INFER_SUITE_DEFAULTS):
        assert name in InferPoint.model_fields
    assert set(kinds.COMM_EXCLUDED) | set(kinds.COMM_TYPES) | set(kinds.COMM_POSITIVE) <= set(CommRequest.model_fields)
    from llmdissect.workloads.train_config import TrainConfig

    assert set(kinds.TRAIN_EXCLUDED) <= set(TrainConfig.model_fields)
    assert list(kinds.train_fields()) == [f for f in TrainConfig.model_fields if f not in kinds.TRAIN_EXCLUDED]


def test_types_choices_and_bounds_follow_the_configs():
    infer = kind_options("infer")
    assert infer["batch"].types == INT and infer["batch"].minimum == 1 and infer["warmup"].minimum == 0
    assert infer["compile"].types == (bool,) and infer["seed"].minimum is None
    assert infer["device"].required is False and infer["model"].required is True
    comm = kind_options("comm")
    assert comm["dtype"].choices == tuple(DTYPES) and comm["backend"].choices == BACKENDS
    assert comm["min_bytes"].types == (int, str) and comm["factor"].types == (int, float)
    serve = kind_options("serve")
    assert serve["request_rate"].types == (int, float, str) and serve["slo"].types == (str,)
    assert serve["endpoint"].choices == ("completions", "chat") and serve["threads"].minimum == 1
    est = kind_options("estimate")
    assert est["workload"].choices == WORKLOADS and est["workload"].required
    assert {k for k, o in est.items() if o.minimum == 1} == set(POSITIVE) - set(SERVE_ONLY)
    assert [k for k, o in est.items() if o.required] == ["workload", "model", "hardware"]


def test_comm_bounds_are_those_build_config_enforces():
    from llmdissect.micro.comm_launch import build_config

    whole = [k for k, o in kind_options("comm").items() if o.types == INT]
    assert whole == ["iters", "warmup", "max_iters", "passes", "nproc"]
    for name in whole:
        req = CommRequest(**{name: 0})
        if name in kinds.COMM_POSITIVE:
            with pytest.raises(UserError):
                build_config(req)
        else:
            build_config(req)


def test_infer_defaults_are_the_points_with_an_auto_device():
    assert infer_defaults() == dict(batch=1, input_len=128, output_len=64, dtype="fp32", attn="sdpa",
                                    cache="dynamic", quant="none", group_size=0, compile=False, warmup=1,
                                    repeats=3, seed=0, device="auto")


def test_a_serve_point_hands_every_load_option_to_the_serve_config():
    given = dict(num_prompts=7, input_len=9, output_len=11, request_rate=3, max_concurrency=2, seed=5,
                 slo="ttft=0.5", endpoint="chat")
    assert set(given) == set(ServePoint.model_fields) - set(SERVER_ONLY) - {"base_url"}, \
        "a new ServePoint option: add it here and pass it on in serve_point.serve_config"
    cfg = serve_config(ServePoint(**given), "http://127.0.0.1:1")
    expected = {**given, "request_rate": 3.0, "slo": {"ttft_s": 0.5}}
    assert {k: getattr(cfg, k) for k in given} == expected
    assert set(given) <= set(ServeConfig.model_fields)
    defaults = serve_config(ServePoint(), "http://127.0.0.1:1").to_config()
    assert defaults["request_rate"] == "inf" and defaults["num_prompts"] == 20 and defaults["output_len"] == 32


@pytest.mark.parametrize("kind, options, field, fragment", [
    ("infer", {"model": "debug-llama", "batch": 0}, "batch", "positive whole number"),
    ("infer", {"model": "debug-llama", "warmup": -1}, "warmup", "at least 0"),
    ("infer", {"model": "debug-llama", "quant": "int3"}, "quant", "not one of none, int8-weight"),
    ("infer", {"model": "debug-llama", "hardware": "cpu"}, "hardware", "unknown option for infer"),
    ("infer", {"batch": 1}, None, "needs the option `model`"),
    ("serve", {"endpoint": "x"}, "endpoint", "not one of completions, chat"),
    ("serve", {"slo": 1}, "slo", "expects str"),
    ("serve", {"timeout_s": 3}, "timeout_s", "unknown option for serve"),
    ("comm", {"min_bytes": 1.5}, "min_bytes", "expects int or str"),
    ("comm", {"iters": 0}, "iters", "positive whole number"),
    ("comm", {"hooks": {}}, "hooks", "unknown option for comm"),
    ("estimate", {"model": "llama2-7b", "hardware": "a800"}, None, "needs the option `workload`"),
    ("estimate", {"workload": "train", "model": "llama2-7b", "hardware": "a800"}, "workload",
     "must be pretrain, finetune or infer"),
    ("estimate", {"workload": "infer", "model": "llama2-7b", "hardware": "a800", "seq": 8}, "seq", "does not apply"),
    ("estimate", {"workload": "pretrain", "model": "llama2-7b", "hardware": "a800", "gpus": 0}, "gpus", "positive"),
])
def test_bad_options_name_their_field(kind, options, field, fragment):
    with pytest.raises(UserError) as e:
        check_options(kind, options)
    assert e.value.field == field and fragment in str(e.value)


def test_good_options_pass_unchanged():
    for kind, options in [("infer", {"model": "debug-llama", "warmup": 0, "seed": -1, "device": "auto"}),
                          ("serve", {"request_rate": 2, "threads": 1}),
                          ("comm", {"min_bytes": 1024, "max_bytes": "1M", "warmup": 0, "factor": 2}),
                          ("estimate", {"workload": "pretrain", "model": "llama2-7b", "hardware": "a800", "zero": 0,
                                        "lora_rank": 0})]:
        assert check_options(kind, options) == options
