"""Grid points of offline inference and how one point becomes a record (parent side).

Shared by `llmdissect bench infer` and the quick suite: validate the whole grid before
anything runs (each point an `InferPoint`), record unsupported points as `skipped` with
their reason, run the others each in a fresh child process (`launch.run_child`) with a timeout.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.workloads.infer_config import CACHES, InferPoint

TARGET = "llmdissect.workloads.infer_child:run"
DEFAULT_TIMEOUT_S = 1800.0


def parse_list(text: str | Iterable[Any], option: str, kind: type = int) -> list[Any]:
    """`"1,2,4"` -> [1, 2, 4] (positive ints), or a list of names; one clear error otherwise."""
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else [str(s).strip() for s in text]
    items = [s for s in items if s]
    if not items:
        raise UserError(f"{option} needs at least one value")
    if kind is str:
        return list(dict.fromkeys(items))
    try:
        values = [int(s) for s in items]
    except ValueError:
        raise UserError(f"{option} takes comma-separated whole numbers, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise UserError(f"{option} values must be positive, got {text!r}")
    return list(dict.fromkeys(values))


def expand_grid(*, model: str, batch: list[int], input_len: list[int], output_len: list[int], dtype: str,
                attn: str, cache: list[str], quant: list[str], compile: bool, warmup: int, repeats: int,
                seed: int = 0, device: str = "auto", group_size: int = 0) -> list[InferPoint]:
    """Every combination as a point (`device` resolved, `hardware` named after it);
    `group_size` goes to the int4-weight points. Input errors raise UserError before anything
    runs."""
    from llmdissect.config import parse_config
    from llmdissect.dtypes import check_compute_dtype
    from llmdissect.modeling import ATTN_IMPLS
    from llmdissect.perfmodel.weights import check_group_size, group_size_key
    from llmdissect.specs import get_model
    from llmdissect.techniques.quantization import check_quant

    spec = get_model(model)
    check_compute_dtype(dtype)
    if attn not in ATTN_IMPLS:
        raise UserError(f"unknown attention {attn!r}; choose one of {', '.join(ATTN_IMPLS)}")
    for c in cache:
        if c not in CACHES:
            raise UserError(f"unknown cache {c!r}; choose one of {', '.join(CACHES)}")
    for q in quant:
        check_quant(q)
    if group_size and "int4-weight" not in quant:
        raise UserError(f"--group-size applies to --quant int4-weight, not {', '.join(quant)}")
    group = group_size_key(check_group_size("int4-weight", group_size)) if group_size else 0
    if warmup < 0 or repeats < 1:
        raise UserError(f"--warmup must be >= 0 and --repeats >= 1, got {warmup} and {repeats}")
    longest = max(input_len) + max(output_len)
    if longest > spec.max_position_embeddings:
        raise UserError(f"input_len + output_len = {longest} exceeds {spec.name}'s "
                        f"max_position_embeddings ({spec.max_position_embeddings})")
    from llmdissect.measure.devices import resolve_device

    local = resolve_device(device)
    dev, hardware = local.torch_device, local.hardware
    points = []
    for q, c, b, i, o in itertools.product(quant, cache, batch, input_len, output_len):
        points.append(parse_config(InferPoint, model=model, hardware=hardware, batch=b, input_len=i, output_len=o,
                                   dtype=dtype, attn=attn, cache=c, quant=q, compile=compile, warmup=warmup,
                                   repeats=repeats, seed=seed, device=dev,
                                   group_size=group if q == "int4-weight" else 0))
    return points


def skip_reason(point: InferPoint) -> str | None:
    """Why this point cannot run on this device, or None."""
    from llmdissect.modeling import check_attn
    from llmdissect.techniques.quantization import unsupported_reason

    try:
        check_attn(point.attn, point.device)
    except UserError as e:
        return str(e)
    return unsupported_reason(point.quant, point.device, point.dtype)


def run_point(point: InferPoint, timeout_s: float = DEFAULT_TIMEOUT_S, threads: int | None = None):
    """One grid point as a RunRecord: `skipped` with its reason, or measured in a child
    (ok, failed, oom or timeout), with `threads` compute threads (default: the launcher's,
    usable cores). Returns (record, user_error)."""
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import RunRecord, utc_now

    config = point.to_config()
    reason = skip_reason(point)
    if reason:
        return RunRecord(kind=mn.INFER, config=config, env=capture_env()).finish("skipped", reason), True
    started = utc_now()
    child = run_child(TARGET, config, timeout_s=timeout_s, threads=threads)
    return record_from_child(mn.INFER, config, child, capture_env(), started_at=started), child.user_error
