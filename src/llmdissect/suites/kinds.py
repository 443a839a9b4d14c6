"""The options each kind of suite entry takes, checked without torch or any launch.

`check_options(kind, options)` returns the normalised options or raises a UserError whose
`field` attribute names the offending option (the suite loader turns it into a line).
Checks here are about the input itself (names, types, ranges, choices); whether a valid
point can run on this machine is decided later, and a point that cannot is `skipped`.

Every kind's options are those of its workload's typed config, read from the config's
fields (names, types, `Literal` choices, `Field` lower bounds), so an option is declared
once, in the config. Where an entry differs from its config, the difference is written
here (and tests/unit/test_suite_kinds.py checks it against the config):

- pretrain, finetune: workloads.train_config.TrainConfig checks them; no kind, no rdzv_endpoint.
- infer: workloads.infer_config.InferPoint; no hardware (named after the device), device auto.
- serve: suites.serve_point.ServePoint (a local server and the load sent to it).
- ops: micro.ops_config.OpsConfig checks them.
- comm: micro.comm_config.CommRequest; one node, the entry's `timeout` for timeout_s, no test
  hooks; sizes may be numbers; choices and bounds are those `comm_launch.build_config` checks.
- estimate: perfmodel.request.EstimateRequest; `workload` names the request's kind.
"""
from __future__ import annotations

import functools
import types as _types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import llmdissect.metric_names as mn
from llmdissect.errors import UserError

KINDS = ("pretrain", "finetune", "infer", "serve", "ops", "comm", "estimate")
INT, FLOAT, STR, BOOL = (int,), (int, float), (str,), (bool,)
SIZE = (int, str)  # 1024 or "1K"

TRAIN_EXCLUDED = ("kind", "rdzv_endpoint")
"""TrainConfig fields an entry does not take: the entry's kind is its own; one node per point."""
INFER_EXCLUDED = ("hardware",)
"""Named after the device the point resolves to (measure.devices)."""
INFER_SUITE_DEFAULTS = {"device": "auto"}
"""An entry's device is a request (auto | cpu | cuda), resolved by `infer_launch.expand_grid`."""
COMM_EXCLUDED = ("nnodes", "node_rank", "rdzv_endpoint", "timeout_s", "hooks")
"""One node per suite point; its time limit is the entry's `timeout`; hooks are for tests."""
COMM_TYPES = {"min_bytes": SIZE, "max_bytes": SIZE}
"""Sizes may be written as numbers of bytes (1024) or as text ("1K")."""
COMM_POSITIVE = ("iters", "max_iters", "passes", "nproc")
"""Whole numbers that must be at least 1: CommRequest takes options as typed, and these are
the bounds `comm_launch.build_config` enforces (tests/unit/test_suite_kinds.py checks they agree)."""


@dataclass(frozen=True)
class Option:
    """One option of a suite entry: the Python types it accepts, its choices, its lower bound."""

    types: tuple[type, ...]
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    """The least value allowed (pydantic's ge, or gt for a whole number)."""
    required: bool = False


class OptionError(UserError):
    """A UserError about one named option."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field


def _annotation_types(annotation: Any) -> tuple[tuple[type, ...], tuple[Any, ...]]:
    """(accepted types, Literal choices) of a field's annotation; None is never a value in a suite."""
    origin = get_origin(annotation)
    if origin is Literal:
        choices = get_args(annotation)
        return tuple(dict.fromkeys(type(c) for c in choices)), choices
    if origin in (Union, _types.UnionType):
        found: dict[type, None] = {}
        choices: tuple[Any, ...] = ()
        for arg in get_args(annotation):
            if arg is type(None):
                continue
            ts, cs = _annotation_types(arg)
            found.update(dict.fromkeys(ts))
            choices += cs
        return tuple(found), choices
    return {int: INT, float: FLOAT, str: STR, bool: BOOL}.get(annotation, (annotation,)), ()


def _minimum(field: Any) -> float | None:
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            return m.ge
        if getattr(m, "gt", None) is not None:
            return m.gt + 1 if field.annotation is int else None
    return None


def options_of(config: Any, *, exclude: tuple[str, ...] = (), types: dict[str, tuple] | None = None,
               positive: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict[str, Option]:
    """The suite options of a pydantic config class: every field not in `exclude`, with the
    types, choices and bounds its annotation and Field declare (`types` overrides the types;
    `positive` adds a lower bound of 1 where the config leaves the check to its builder;
    `optional` fields are required by the config but filled in for a suite entry)."""
    out = {}
    for name, field in config.model_fields.items():
        if name in exclude:
            continue
        accepted, choices = _annotation_types(field.annotation)
        out[name] = Option(types=(types or {}).get(name, accepted), choices=choices,
                           minimum=1 if name in positive else _minimum(field),
                           required=field.is_required() and name not in optional)
    return out


@functools.cache
def kind_options(kind: str) -> dict[str, Option] | None:
    """The options an entry of `kind` takes; None where the config itself checks them (train, ops)."""
    if kind in ("pretrain", "finetune", "ops"):
        return None
    if kind == "infer":
        from llmdissect.workloads.infer_config import InferPoint

        return options_of(InferPoint, exclude=INFER_EXCLUDED, optional=tuple(INFER_SUITE_DEFAULTS))
    if kind == "serve":
        from llmdissect.suites.serve_point import ServePoint

        return options_of(ServePoint)
    if kind == "comm":
        from llmdissect.micro.collectives import BACKENDS, DTYPES
        from llmdissect.micro.comm_config import CommRequest

        opts = options_of(CommRequest, exclude=COMM_EXCLUDED, types=COMM_TYPES, positive=COMM_POSITIVE)
        opts["dtype"] = Option(STR, tuple(DTYPES))  # CommRequest takes any text; build_config checks it
        opts["backend"] = Option(STR, BACKENDS)
        return opts
    if kind == "estimate":
        from llmdissect.perfmodel.request import ANALYTICAL_KINDS as WORKLOADS
        from llmdissect.perfmodel.request import POSITIVE, SERVE_ONLY, EstimateRequest

        # a suite's estimate entries are closed-form ones: no serving load
        opts = {k: v for k, v in options_of(EstimateRequest, positive=POSITIVE).items() if k not in SERVE_ONLY}
        return {"workload": Option(STR, WORKLOADS, required=True), **{k: v for k, v in opts.items() if k != "kind"}}
    raise KeyError(kind)


def infer_defaults() -> dict[str, Any]:
    """The options an `infer` entry leaves out, at their defaults (InferPoint's, device auto)."""
    from llmdissect.workloads.infer_config import InferPoint

    defaults = {name: f.default for name, f in InferPoint.model_fields.items()
                if not f.is_required() and name not in INFER_EXCLUDED}
    return {**defaults, **INFER_SUITE_DEFAULTS}


def train_fields() -> dict[str, tuple]:
    from llmdissect.workloads.train_config import TrainConfig

    return {name: () for name in TrainConfig.model_fields if name not in TRAIN_EXCLUDED}


def check_options(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    if kind in mn.TRAIN_KINDS:
        return _check_train(kind, options)
    if kind == "ops":  # the operator benchmark's own config (`bench ops`) checks them
        return _check_ops(options)
    schema = kind_options(kind)
    for key, value in options.items():
        if key not in schema:
            raise OptionError(key, f"unknown option for {kind}; known: {', '.join(schema)}")
        types = schema[key].types
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise OptionError(key, f"expects {' or '.join(t.__name__ for t in types)}, got {value!r}")
        low = schema[key].minimum
        if low is not None and not isinstance(value, (bool, str)) and value < low:
            raise OptionError(key, f"must be a positive whole number, got {value}" if low == 1 and types == INT
                              else f"must be at least {low:g}, got {value}")
    for key, option in schema.items():
        if option.required and key not in options:
            raise OptionError(None, f"{kind} needs the option `{key}`")
    if kind == mn.ESTIMATE:
        return _check_estimate(options)
    for key, option in schema.items():
        if key in options and option.choices and options[key] not in option.choices:
            raise OptionError(key, f"{options[key]!r} is not one of {', '.join(map(str, option.choices))}")
    if "model" in options:
        _check_model(options["model"])
    return dict(options)


def _check_model(name: str) -> None:
    from llmdissect.specs import get_model

    try:
        get_model(name)
    except UserError as e:
        raise OptionError("model", str(e)) from None


def _pydantic_error(e: Any) -> OptionError:
    err = e.errors()[0]
    key = str(err["loc"][0]) if err.get("loc") else None
    return OptionError(key, f"{err['msg']} (got {err.get('input')!r})")


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
        raise _pydantic_error(e) from None
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
        raise _pydantic_error(e) from None
    if "model" in options:
        _check_model(options["model"])
    return dict(options)


def _check_estimate(options: dict[str, Any]) -> dict[str, Any]:
    from llmdissect.perfmodel.request import ANALYTICAL_KINDS as WORKLOADS
    from llmdissect.perfmodel.request import NOT_FOR

    workload = options["workload"]
    if workload not in WORKLOADS:
        raise OptionError("workload", f"must be {', '.join(WORKLOADS[:-1])} or {WORKLOADS[-1]}, got {workload!r}")
    for key in NOT_FOR[workload]:
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
