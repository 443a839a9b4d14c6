"""The typed configs follow the house style: a docstring under each field, `extra="forbid"`,
and choices that are those of the code that implements them."""
from __future__ import annotations

import ast
import inspect
from typing import get_args

import pytest

from llmdissect.micro.comm_config import CommRequest
from llmdissect.micro.ops_config import OpsConfig
from llmdissect.perfmodel.request import EstimateRequest
from llmdissect.suites.serve_point import ServePoint
from llmdissect.workloads.infer_config import CACHES, GRID_FIELDS, InferPoint
from llmdissect.workloads.serve.serve_config import ENDPOINTS, Endpoint, ServeConfig, ServerKind
from llmdissect.workloads.train_config import TrainConfig

CONFIGS = [TrainConfig, ServeConfig, CommRequest, InferPoint, ServePoint, OpsConfig, EstimateRequest]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_has_a_docstring_and_unknown_fields_are_refused(config):
    tree = ast.parse(inspect.getsource(config))
    body = tree.body[0].body
    undocumented = [node.target.id for i, node in enumerate(body)
                    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and not (i + 1 < len(body) and isinstance(body[i + 1], ast.Expr)
                             and isinstance(body[i + 1].value, ast.Constant)
                             and isinstance(body[i + 1].value.value, str))]
    assert not undocumented, f"{config.__name__}: write a docstring under {undocumented}"
    assert config.model_config.get("extra") == "forbid"


def test_serve_choices_are_the_load_generators():
    from llmdissect.workloads.serve.client import SERVER_KINDS

    assert get_args(Endpoint) == tuple(ENDPOINTS)
    assert get_args(ServerKind) == tuple(SERVER_KINDS)


def test_infer_choices_are_the_implementations():
    from llmdissect.dtypes import COMPUTE_DTYPES
    from llmdissect.modeling import ATTN_IMPLS
    from llmdissect.techniques.quantization import QUANT_METHODS

    f = InferPoint.model_fields
    assert get_args(f["dtype"].annotation) == COMPUTE_DTYPES
    assert get_args(f["attn"].annotation) == tuple(ATTN_IMPLS)
    assert get_args(f["quant"].annotation) == QUANT_METHODS
    assert get_args(f["cache"].annotation) == CACHES == ("dynamic", "static")


def test_expand_grid_takes_every_point_field():
    from llmdissect.workloads.infer_launch import expand_grid

    params = inspect.signature(expand_grid).parameters
    assert set(params) == set(InferPoint.model_fields) - {"hardware"}
    assert tuple(n for n, p in params.items() if str(p.annotation).startswith("list")) == GRID_FIELDS
    assert set(GRID_FIELDS) <= set(InferPoint.model_fields)
