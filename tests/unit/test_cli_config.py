"""A measuring command's options are its config's fields, and `estimate`'s are EstimateRequest's:
the same names (--micro-batch for micro_batch) and the same defaults. A new option is a new
config field first; what only the command has (where to store, how long to wait) is listed
here with the reason, so an option added to one side only fails this test."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import typer

from llmdissect.cli.main import app
from llmdissect.micro.comm_config import HOOKS, CommRequest
from llmdissect.micro.ops_config import OpsConfig
from llmdissect.perfmodel.request import EstimateRequest
from llmdissect.workloads.infer_config import GRID_FIELDS, InferPoint
from llmdissect.workloads.infer_launch import parse_list
from llmdissect.workloads.serve.metrics import parse_slo
from llmdissect.workloads.serve.serve_config import ServeConfig
from llmdissect.workloads.train_config import TrainConfig

RUN = {"db": "where the record is stored", "json": "how the record is printed"}
CHILD = {"threads": "compute threads of the child (the record's env says how many ran)"}
COST = {"usd_per_hour": "a price for the record's cost per token (workloads/cost.py), not what runs"}
TRAIN_RUN = {**RUN, **CHILD, **COST, "timeout": "seconds before the child is killed (status timeout)",
             "max_memory": "address-space limit of the child (status oom)"}
LORA = ("method", "lora_rank", "lora_alpha", "lora_targets")
COMM_HOOK_OPTIONS = ("check_offset", "die_rank", "hang_rank")


@dataclass
class Case:
    config: Any
    cli_only: dict[str, str]
    """Options of the command that are not fields of the config, and why."""
    config_only: dict[str, str] = field(default_factory=dict)
    """Fields of the config that the command sets otherwise, and how."""
    renamed: dict[str, str] = field(default_factory=dict)
    """field -> option, where the option's name is not the field's (options are not renamed)."""
    cli_default: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    """field -> how the command turns its default into the config's value."""
    other_default: dict[str, str] = field(default_factory=dict)
    """Fields whose command default is another than the config's, and why."""


CASES = {
    "bench pretrain": Case(TrainConfig, TRAIN_RUN, config_only={
        "kind": "the subcommand", **{k: "pre-training trains every weight (bench finetune takes it)" for k in LORA}}),
    "bench finetune": Case(TrainConfig, TRAIN_RUN, config_only={"kind": "the subcommand"},
                           other_default={"method": "bench finetune fine-tunes with LoRA unless told otherwise"}),
    "bench infer": Case(InferPoint, {**RUN, **CHILD, **COST, "timeout_s": "per-point limit of each child"},
                        config_only={"hardware": "named after the device --device resolves to"},
                        cli_default={k: (lambda text, k=k: parse_list(text, k,
                                                                      str if k in ("cache", "quant") else int)[0])
                                     for k in GRID_FIELDS}),
    "bench serve": Case(ServeConfig, {**RUN, "sweep_rates": "one run per rate, each with its request_rate",
                                      "api_key": "sent as a bearer token, never stored",
                                      "save_arrivals": "a file the realised send offsets are written to",
                                      "find_max_rate": "a capacity search over the rate (CapacitySearch.over)",
                                      "find_max_concurrency": "a capacity search over concurrency (CapacitySearch)",
                                      **{k: "a field of workloads.serve.capacity.CapacitySearch"
                                         for k in ("search_start", "search_low", "search_high", "search_precision",
                                                   "warmup_requests", "max_probes")}},
                        cli_default={"request_rate": float, "slo": parse_slo}),
    "bench comm": Case(CommRequest, {**RUN, "profile": "stores the fits in the calibration profile",
                                     **{h: "hidden test hook, passed in CommRequest.hooks" for h in COMM_HOOK_OPTIONS}},
                       config_only={"hooks": "the hidden --check-offset, --die-rank and --hang-rank"}),
    "bench ops": Case(OpsConfig, {**RUN, **CHILD, "profile": "stores the efficiencies in the calibration profile",
                                  "timeout": "seconds before the child is killed"},
                      renamed={"passes": "--pass", "min_time_s": "--min-time"},
                      other_default={"device": "the config holds the device --device auto resolves to"}),
    "estimate": Case(EstimateRequest, {**RUN, "calibration": "which calibration profile is read",
                                       "store": "whether the estimate is stored"}),
}


def _command(path: str):
    cmd = typer.main.get_command(app)
    for part in path.split():
        cmd = cmd.commands[part]
    return cmd


def _options(path: str) -> dict[str, Any]:
    """name -> click parameter, named as a config field: --micro-batch -> micro_batch; arguments by name."""
    out = {}
    for p in _command(path).params:
        long = [o for o in p.opts if o.startswith("--")]
        out[long[0][2:].replace("-", "_") if long else p.name] = p
    return out


def _field_option(case: Case, name: str) -> str:
    return case.renamed.get(name, "--" + name).removeprefix("--").replace("-", "_")


@pytest.mark.parametrize("path", CASES)
def test_options_are_the_config_fields(path):
    case = CASES[path]
    options = _options(path)
    fields = set(case.config.model_fields) - set(case.config_only)
    by_field = {_field_option(case, f): f for f in fields}
    missing = sorted(f for o, f in by_field.items() if o not in options)
    assert not missing, f"`{path}` has no option for config field(s) {missing}: add the option, or list " \
                        f"the field in config_only with the reason"
    extra = sorted(o for o in options if o not in by_field and o not in case.cli_only)
    assert not extra, f"`{path}` option(s) {extra} are not fields of {case.config.__name__}: add the field, or " \
                      f"list the option in cli_only with the reason"
    stale = sorted(set(case.cli_only) - set(options)) + sorted(set(case.config_only) - set(case.config.model_fields))
    assert not stale, f"listed but gone: {stale}"
    assert not set(case.cli_only) & set(by_field), "an option cannot be both a field and command-only"


@pytest.mark.parametrize("path", CASES)
def test_options_default_to_the_config_defaults(path):
    case = CASES[path]
    options = _options(path)
    for name, f in case.config.model_fields.items():
        if name in case.config_only or name in case.other_default or f.is_required():
            continue
        param = options[_field_option(case, name)]
        default = case.cli_default.get(name, lambda v: v)(param.default)
        assert default == f.get_default(call_default_factory=True), \
            f"`{path}` {param.opts[0]} defaults to {param.default!r}, {case.config.__name__}.{name} to {f.default!r}"
    for name in case.other_default:
        assert options[_field_option(case, name)].default != case.config.model_fields[name].default


def test_hidden_options_are_the_test_hooks():
    hidden = {n for n, p in _options("bench comm").items() if getattr(p, "hidden", False)}
    assert hidden == set(COMM_HOOK_OPTIONS) and hidden <= set(HOOKS)


def test_serve_rate_inf_is_stored_as_text():
    cfg = ServeConfig(base_url="http://127.0.0.1:1")
    assert math.isinf(cfg.request_rate) and cfg.to_config()["request_rate"] == "inf"
    assert list(cfg.to_config()) == list(ServeConfig.model_fields)
