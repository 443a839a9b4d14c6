"""The options each kind of suite entry takes, checked without torch or any launch.

`check_options(kind, options)` returns the normalised options or raises a UserError whose
`field` attribute names the offending option (the suite loader turns it into a line).
Checks here are about the input itself (names, types, ranges, choices); whether a valid
point can run on this machine is decided later, and a point that cannot is `skipped`.
"""
from __future__ import annotations

from typing import Any

from llmdissect.errors import UserError
import llmdissect.metric_names as mn

INT, FLOAT, STR, BOOL = (int,), (int, float), (str,), (bool,)
SIZE = (int, str)  # 1024 or "1K"

_TRAIN = None  # filled from TrainConfig on first use (pydantic is the source of truth)
INFER = {"model": STR, "batch": INT, "input_len": INT, "output_len": INT, "dtype": STR, "attn": STR, "cache": STR,
         "quant": STR, "compile": BOOL, "warmup": INT, "repeats": INT, "seed": INT, "device": STR}
SERVE = {"model": STR, "base_url": STR, "num_prompts": INT, "input_len": INT, "output_len": INT,
         "request_rate": (int, float, str), "max_concurrency": INT, "threads": INT, "seed": INT, "slo": STR,
         "endpoint": STR}
COMM = {"ops": STR, "min_bytes": SIZE, "max_bytes": SIZE, "factor": FLOAT, "dtype": STR, "iters": INT,
        "warmup": INT, "backend": STR, "nproc": INT}
ESTIMATE = {"workload": STR, "model": STR, "hardware": STR, "gpus": INT, "dtype": STR, "micro_batch": INT,
            "seq": INT, "grad_accum": INT, "zero": INT, "offload": STR, "recompute": STR, "attn": STR, "tp": INT,
            "pp": INT, "optimizer": STR, "lora_rank": INT, "lora_targets": STR, "quant": STR, "batch": INT,
            "input_len": INT, "output_len": INT}
OPS = None  # checked by llmdissect.micro.ops_config.OpsConfig (`bench ops`)

KIND_OPTIONS: dict[str, dict[str, tuple] | None] = {
    mn.PRETRAIN: _TRAIN, mn.FINETUNE: _TRAIN, mn.INFER: INFER, mn.SERVE: SERVE, mn.OPS: OPS, mn.COMM: COMM,
    mn.ESTIMATE: ESTIMATE}
CHOICES = {mn.INFER: {"dtype": ("fp32", "bf16", "fp16"), "attn": ("eager", "sdpa", "flash"),
                     "cache": ("dynamic", "static"),
                     "quant": ("none", "int8-weight", "int8-dynamic", "int4-weight", "nf4", "int8-bnb")},
           mn.COMM: {"dtype": ("fp32", "bf16", "fp16"), "backend": ("gloo", "nccl")},
           mn.SERVE: {"endpoint": ("completions", "chat")}}
REQUIRED = {mn.ESTIMATE: ("workload", "model", "hardware"), mn.INFER: ("model",), mn.SERVE: (), mn.COMM: ()}


class OptionError(UserError):
    """A UserError about one named option."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field


def train_fields() -> dict[str, tuple]:
    from llmdissect.workloads.train_config import TrainConfig

    return {name: () for name in TrainConfig.model_fields if name not in ("kind", "rdzv_endpoint")}


def check_options(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    if kind in mn.TRAIN_KINDS:
        return _check_train(kind, options)
    schema = KIND_OPTIONS[kind]
    if schema is None:  # ops: the operator benchmark's own config (`bench ops`) checks them
        return _check_ops(options)
    for key, value in options.items():
        if key not in schema:
            raise OptionError(key, f"unknown option for {kind}; known: {', '.join(schema)}")
        types = schema[key]
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise OptionError(key, f"expects {' or '.join(t.__name__ for t in types)}, got {value!r}")
        if types == INT and value <= 0 and key not in ("seed", "warmup", "zero", "lora_rank"):
            raise OptionError(key, f"must be a positive whole number, got {value}")
    for key in REQUIRED.get(kind, ()):
        if key not in options:
            raise OptionError(None, f"{kind} needs the option `{key}`")
    if kind == mn.ESTIMATE:
        return _check_estimate(options)
    for key, choices in CHOICES.get(kind, {}).items():
        if key in options and options[key] not in choices:
            raise OptionError(key, f"{options[key]!r} is not one of {', '.join(choices)}")
    if "model" in options:
        _check_model(options["model"])
    return dict(options)


def _check_model(name: str) -> None:
    from llmdissect.specs import get_model

    try:
        get_model(name)
    except UserError as e:
        raise OptionError("model", str(e)) from None


def _check_train(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    from llmdissect.workloads.train_config import TrainConfig

    fields = train_fields()
    for key in options:
        if key not in fields:
            raise OptionError(key, f"unknown option for {kind}; known: {', '.join(fields)}")
    opts = dict(options)
    if kind == mn.FINETUNE:
        opts.setdefault("method", "lora")  # as `bench finetune`
    try:
        TrainConfig(kind=kind, **opts)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err.get("loc") else None
        raise OptionError(key, f"{err['msg']} (got {err.get('input')!r})") from None
    _check_model(opts.get("model", "tiny-llama"))
    return opts


def _check_ops(options: dict[str, Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    try:
        from llmdissect.micro.ops_config import OpsConfig
    except ImportError:  # no operator benchmark in this build: the point will be skipped
        return dict(options)
    try:
        OpsConfig(**options)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err.get("loc") else None
        raise OptionError(key, f"{err['msg']} (got {err.get('input')!r})") from None
    if "model" in options:
        _check_model(options["model"])
    return dict(options)


def _check_estimate(options: dict[str, Any]) -> dict[str, Any]:
    workload = options["workload"]
    if workload not in (mn.PRETRAIN, mn.FINETUNE, mn.INFER):
        raise OptionError("workload", f"must be pretrain, finetune or infer, got {workload!r}")
    wrong = ("batch", "input_len", "output_len") if workload != mn.INFER else \
        ("micro_batch", "seq", "grad_accum", "zero", "offload", "recompute", "pp", "lora_rank", "optimizer")
    for key in wrong:
        if key in options:
            raise OptionError(key, f"does not apply to an estimate of {workload}")
    from llmdissect.specs import resolve_platform

    _check_model(options["model"])
    try:
        resolve_platform(options["hardware"], options.get("gpus"))
    except UserError as e:
        raise OptionError("hardware", str(e)) from None
    return dict(options)


def estimate_opts(options: dict[str, Any]) -> dict[str, Any]:
    """The options of an `estimate` entry as `perfmodel.request.estimate_request` takes them."""
    opts = {k: v for k, v in options.items() if k != "workload"}
    return {"attn": "sdpa", "quant": "none", "tp": 1, **opts}
