"""Measured workloads from Python: `llmdissect.bench.pretrain|finetune|infer|serve(...)`.

Each function does what `llmdissect bench KIND ... --json` does, without typer and without
printing: the same validation (bad input raises `llmdissect.errors.UserError` before anything
runs), the same child process per run (torchrun for several processes), the same records,
stored unless `store=False`. A run that fails, runs out of memory or times out is returned
as a record with that status; no exception. Where the command would exit 2 after a run
(bad input that only the run could find: a child that refused its config, a single inference
point this device cannot run, an unreachable server), the record is stored and a UserError
is raised with the record on its `record` attribute.

Options are keyword-only and named as the command's (`--micro-batch` is `micro_batch`), with
the command's defaults; time limits are `timeout_s` everywhere.
"""
from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from llmdissect.results.schema import RunRecord

DbArg = str | os.PathLike | None
"""A results store path; None: $LLMDISSECT_DB or .llmdissect/results.db."""
Grid = int | str | Sequence[int]
"""One value, a comma-separated string ("1,2,4") or a list: every combination is one point."""
Names = str | Sequence[str]


def _check_threads(threads: int | None) -> None:
    from llmdissect.errors import UserError

    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise UserError(f"threads must be a whole number >= 1, got {threads!r}")


def _db_path(store: bool, db: DbArg):
    """Check the store is writable before any long run (as the commands do)."""
    from llmdissect.results.store import check_writable

    return check_writable(db) if store else None


def _done(record: RunRecord, store: bool, db, user_error: bool) -> RunRecord:
    """Store `record` (whatever its status); raise UserError where the command exits 2."""
    from llmdissect.errors import UserError
    from llmdissect.results.recording import save

    if store:
        save(record, db)
    if record.status != "ok" and user_error:
        err = UserError(record.error or "bad input")
        err.record = record  # type: ignore[attr-defined]
        raise err
    return record


def _dtype_warning(dtype: str, device: str, depth: int) -> None:
    """The command's note on slow half precision on this CPU, as a warning at the caller's
    line (`depth`: the public function's frames below this one)."""
    from llmdissect.dtypes import cpu_dtype_note

    if msg := cpu_dtype_note(dtype, device):
        warnings.warn(msg, stacklevel=depth + 2)


def _train(kind: str, options: dict[str, Any], timeout_s: float | None, max_memory: int | str | None,
           threads: int | None, store: bool, db: DbArg, usd_per_hour: float | None = None) -> RunRecord:
    from llmdissect.units import parse_bytes
    from llmdissect.workloads.cost import add_cost, price_for
    from llmdissect.workloads.train_launch import prepare, run_training

    cfg = prepare(kind, **options)
    price_for(None, 1, usd_per_hour)
    limit = parse_bytes(str(max_memory), "max_memory") if max_memory is not None else None
    _check_threads(threads)
    db_path = _db_path(store, db)
    _dtype_warning(cfg.dtype, cfg.device, 2)
    record, child = run_training(cfg, timeout_s=timeout_s, max_memory_bytes=limit, threads=threads)
    add_cost(record, usd_per_hour)
    return _done(record, store, db_path, child.user_error)


def pretrain(*, model: str = "tiny-llama", engine: str | None = None, zero: int = 0, offload: str = "none",
             recompute: str = "none", attn: str = "sdpa", dtype: str = "fp32", optimizer: str = "adamw",
             micro_batch: int = 1, seq: int = 128, grad_accum: int = 1, steps: int = 5, warmup: int = 2,
             nproc: int = 1, nnodes: int = 1, rdzv_endpoint: str | None = None, compile: bool = False,
             data: str | None = None, tokenizer: str | None = None, seed: int = 0, device: str = "auto",
             lr: float = 1e-3, ds_config: str | None = None, tp: int = 1, ep: int = 1,
             timeout_s: float | None = 1800.0,
             max_memory: int | str | None = None, threads: int | None = None, usd_per_hour: float | None = None,
             store: bool = True, db: DbArg = None) -> RunRecord:
    """Measure pre-training steps of a Llama-family model (random weights), as `llmdissect bench pretrain`.

    The options are the command's (`llmdissect bench pretrain --help`, fields of
    `workloads.train_config.TrainConfig`). `timeout_s` is `--timeout` (None: no limit),
    `max_memory` is `--max-memory` (bytes, or a size such as "4G"), `threads` the threads
    per process (default: usable cores / processes), `usd_per_hour` the price of the devices
    used (default: the catalogue's, where it has one) for `usd_per_million_training_tokens`.

    Returns:
        The `RunRecord` (kind "pretrain", source "measured"): status ok with the metrics of
        docs/metrics.md (`step_time_s`, `tokens_per_s`, `mfu`, `peak_memory_bytes`, `loss`,
        ...), or failed / oom / timeout with `error`. Stored unless `store=False`.

    Raises:
        llmdissect.errors.UserError: bad input (unknown model, an impossible combination,
            a configuration that cannot fit in this machine's memory, a store that cannot
            be written), before anything runs.
    """
    options = dict(model=model, engine=engine, zero=zero, offload=offload, recompute=recompute, attn=attn,
                   dtype=dtype, optimizer=optimizer, micro_batch=micro_batch, seq=seq, grad_accum=grad_accum,
                   steps=steps, warmup=warmup, nproc=nproc, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint,
                   compile=compile, data=data, tokenizer=tokenizer, seed=seed, device=device, lr=lr,
                   ds_config=ds_config, tp=tp, ep=ep)
    return _train("pretrain", options, timeout_s, max_memory, threads, store, db, usd_per_hour)


def finetune(*, model: str = "tiny-llama", method: str = "lora", lora_rank: int = 8, lora_alpha: int = 16,
             lora_targets: str = "q_proj,k_proj,v_proj,o_proj", engine: str | None = None, zero: int = 0,
             offload: str = "none", recompute: str = "none", attn: str = "sdpa", dtype: str = "fp32",
             optimizer: str = "adamw", micro_batch: int = 1, seq: int = 128, grad_accum: int = 1, steps: int = 5,
             warmup: int = 2, nproc: int = 1, nnodes: int = 1, rdzv_endpoint: str | None = None,
             compile: bool = False, data: str | None = None, tokenizer: str | None = None, seed: int = 0,
             device: str = "auto", lr: float = 1e-3, ds_config: str | None = None, tp: int = 1, ep: int = 1,
             timeout_s: float | None = 1800.0, max_memory: int | str | None = None,
             threads: int | None = None, usd_per_hour: float | None = None, store: bool = True,
             db: DbArg = None) -> RunRecord:
    """Measure fine-tuning steps (full, LoRA or QLoRA), as `llmdissect bench finetune`.

    The options and the result are those of `pretrain`, plus `method` (full | lora | qlora,
    default lora as the command's), `lora_rank`, `lora_alpha` and `lora_targets`.

    Raises:
        llmdissect.errors.UserError: bad input, before anything runs (see `pretrain`).
    """
    options = dict(model=model, method=method, lora_rank=lora_rank, lora_alpha=lora_alpha,
                   lora_targets=lora_targets, engine=engine, zero=zero, offload=offload, recompute=recompute,
                   attn=attn, dtype=dtype, optimizer=optimizer, micro_batch=micro_batch, seq=seq,
                   grad_accum=grad_accum, steps=steps, warmup=warmup, nproc=nproc, nnodes=nnodes,
                   rdzv_endpoint=rdzv_endpoint, compile=compile, data=data, tokenizer=tokenizer, seed=seed,
                   device=device, lr=lr, ds_config=ds_config, tp=tp, ep=ep)
    return _train("finetune", options, timeout_s, max_memory, threads, store, db, usd_per_hour)


def _grid(value: Grid | Names, option: str, kind: type = int) -> list[Any]:
    from llmdissect.workloads.infer_launch import parse_list

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    return parse_list(value, option, kind)


def infer(*, model: str = "tiny-llama", batch: Grid = 1, input_len: Grid = 128, output_len: Grid = 64,
          dtype: str = "fp32", attn: str = "sdpa", cache: Names = "dynamic", quant: Names = "none",
          group_size: int = 0, compile: bool = False, warmup: int = 1, repeats: int = 3, seed: int = 0,
          device: str = "auto",
          timeout_s: float = 1800.0, threads: int | None = None, usd_per_hour: float | None = None,
          store: bool = True,
          db: DbArg = None) -> list[RunRecord]:
    """Time `generate` over a grid of points, as `llmdissect bench infer`.

    `batch`, `input_len`, `output_len`, `cache` and `quant` take one value or several (a list
    or a comma-separated string); every combination is one point, run in its own child
    process with the per-point limit `timeout_s`; `group_size` is int4-weight's (0: torchao's
    128). `usd_per_hour` (default: the catalogue's
    price of the device, where it has one) adds the cost per million input and output tokens.

    Returns:
        One `RunRecord` (kind "infer") per point, in grid order: ok with TTFT, TPOT, e2e
        latency, prefill/decode tokens/s, KV-cache and peak memory; skipped (with the reason)
        where this device cannot run a point of a grid; failed / oom / timeout otherwise.
        Each is stored as soon as it ends, unless `store=False`.

    Raises:
        llmdissect.errors.UserError: bad input, before anything runs; or, as the command
            exits 2 then, a single point this device cannot run (its record is on the
            exception's `record` attribute).
    """
    from llmdissect.workloads.cost import add_cost, price_for
    from llmdissect.workloads.infer_launch import expand_grid, run_point

    price_for(None, 1, usd_per_hour)
    points = expand_grid(model=model, batch=_grid(batch, "--batch"), input_len=_grid(input_len, "--input-len"),
                         output_len=_grid(output_len, "--output-len"), dtype=dtype, attn=attn,
                         cache=_grid(cache, "--cache", str), quant=_grid(quant, "--quant", str), compile=compile,
                         warmup=warmup, repeats=repeats, seed=seed, device=device, group_size=group_size)
    _check_threads(threads)
    db_path = _db_path(store, db)
    _dtype_warning(dtype, points[0].device, 1)
    records = []
    for point in points:
        record, user_error = run_point(point, timeout_s, threads)
        add_cost(record, usd_per_hour)
        # each point is stored as soon as it ends; a grid goes on past a point that cannot run
        records.append(_done(record, store, db_path, len(points) == 1 and (user_error or record.status == "skipped")))
    return records


def _rates(request_rate: float | str, sweep_rates: str | Sequence[float] | None) -> list[float]:
    from llmdissect.workloads.serve.arrivals import parse_rates

    if sweep_rates is None:
        return parse_rates(str(request_rate))[:1]
    text = sweep_rates if isinstance(sweep_rates, str) else ",".join(str(r) for r in sweep_rates)
    return parse_rates(text)


def _slo(slo: str | Mapping[str, float] | None) -> dict[str, float]:
    from llmdissect.workloads.serve.metrics import parse_slo

    if isinstance(slo, Mapping):
        slo = ",".join(f"{k}={v}" for k, v in slo.items())
    return parse_slo(slo)


def _check_serve(base_url: str, endpoint: str, server_kind: str, counts: dict[str, int | None]) -> None:
    """The checks `bench serve` makes before it sends anything."""
    from llmdissect.errors import UserError
    from llmdissect.workloads.serve.client import SERVER_KINDS
    from llmdissect.workloads.serve.loadgen import ENDPOINTS

    if endpoint not in ENDPOINTS:
        raise UserError(f"endpoint must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}")
    if server_kind not in SERVER_KINDS:
        raise UserError(f"server_kind must be one of {', '.join(SERVER_KINDS)}, got {server_kind!r}")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise UserError(f"base_url must start with http:// or https://, got {base_url!r}")
    for name, value in counts.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UserError(f"{name} must be a whole number >= 1, got {value!r}")


def serve(*, base_url: str, model: str | None = None, endpoint: str = "completions", stream: bool = True,
          num_prompts: int = 100, input_len: int = 128, output_len: int | None = None,
          dataset: str | os.PathLike[str] | None = None, tokenizer: str | os.PathLike[str] | None = None,
          request_rate: float | str = math.inf, burstiness: float = 1.0, max_concurrency: int | None = None,
          arrivals: str | os.PathLike[str] | None = None, sweep_rates: str | Sequence[float] | None = None,
          slo: str | Mapping[str, float] | None = None, server_kind: str = "auto", turns: int = 1,
          think_time_s: float = 0.0, shared_prefixes: int = 0, prefix_len: int = 64, prefix_fraction: float = 1.0,
          trace: str | os.PathLike[str] | None = None, trace_format: str = "auto", time_scale: float = 1.0,
          trace_block_tokens: int = 512, find_max_rate: bool = False, find_max_concurrency: bool = False,
          search_start: float = 1.0, search_low: float = 0.05, search_high: float = 1024.0,
          search_precision: float = 0.1, warmup_requests: int = 5, max_probes: int = 16,
          usd_per_hour: float | None = None, seed: int = 0, timeout_s: float = 300.0, api_key: str | None = None,
          save_arrivals: str | os.PathLike[str] | None = None, store: bool = True,
          db: DbArg = None) -> list[RunRecord]:
    """Measure an OpenAI-compatible server under load, as `llmdissect bench serve`.

    The options are the command's. `request_rate` is requests/s (Poisson, gamma with
    `burstiness`) or inf; `sweep_rates` (a list or "1,2,inf") runs one measurement per rate;
    `slo` is {"ttft": 0.5, "tpot": 0.05} or "ttft=0.5,tpot=0.05" (seconds) for goodput;
    `turns`/`think_time_s` make multi-turn sessions, `shared_prefixes`/`prefix_len`/
    `prefix_fraction` a shared-prefix load, `trace` (with `trace_format`, `time_scale`,
    `trace_block_tokens`) replays a trace file; `find_max_rate` / `find_max_concurrency` search
    the capacity that meets `slo`'s targets (with the `search_*`, `warmup_requests` and
    `max_probes` settings) and return its one record (docs/serving.md); `usd_per_hour` adds
    the cost per million input and output tokens;
    `api_key` (default: $OPENAI_API_KEY) is sent as a bearer token and never stored;
    `save_arrivals` writes the realised send offsets of the last rate to that file.

    Returns:
        One `RunRecord` (kind "serve") per rate: ok when every request completed, failed
        (with the counts and the first error) otherwise. Stored unless `store=False`.

    Raises:
        llmdissect.errors.UserError: bad input, before anything is sent; or, as the command
            exits 2 then, a run that could not start (an unreachable server, a server that
            is not OpenAI-compatible, no tokenizer for synthetic prompts): its failed record
            is stored first and is on the exception's `record` attribute.
    """
    import json
    from pathlib import Path

    from llmdissect.config import parse_config
    from llmdissect.workloads.serve.capacity import CapacitySearch, search_over
    from llmdissect.workloads.serve.capacity_run import capacity_record
    from llmdissect.workloads.serve.loadgen import API_KEY_ENV
    from llmdissect.workloads.serve.plan import preflight
    from llmdissect.workloads.serve.record import serve_record
    from llmdissect.workloads.serve.serve_config import ServeConfig

    _check_serve(base_url, endpoint, server_kind, {"num_prompts": num_prompts, "input_len": input_len,
                                                  "output_len": output_len, "max_concurrency": max_concurrency})
    rates = _rates(request_rate, sweep_rates)
    slos = _slo(slo)
    db_path = _db_path(store, db)
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    records = []
    for rate in rates:
        cfg = parse_config(ServeConfig, base_url=base_url, model=model, endpoint=endpoint, stream=stream,
                           num_prompts=num_prompts, input_len=input_len, output_len=output_len,
                           dataset=str(dataset) if dataset else None, tokenizer=str(tokenizer) if tokenizer else None,
                           request_rate=rate,
                           burstiness=burstiness, max_concurrency=max_concurrency,
                           arrivals=str(arrivals) if arrivals else None, seed=seed, server_kind=server_kind, slo=slos,
                           timeout_s=timeout_s, turns=turns, think_time_s=think_time_s,
                           shared_prefixes=shared_prefixes, prefix_len=prefix_len, prefix_fraction=prefix_fraction,
                           trace=str(trace) if trace else None, trace_format=trace_format, time_scale=time_scale,
                           trace_block_tokens=trace_block_tokens, usd_per_hour=usd_per_hour)
        preflight(cfg)
        if find_max_rate or find_max_concurrency:
            over = search_over(find_max_rate, find_max_concurrency, sweep_rates)
            search_cfg = parse_config(CapacitySearch, over=over, search_start=search_start, search_low=search_low,
                                      search_high=search_high, search_precision=search_precision,
                                      warmup_requests=warmup_requests, max_probes=max_probes)
            return [_done(capacity_record(cfg, search_cfg, api_key=key), store, db_path, False)]
        record, bad_input = serve_record(cfg, api_key=key)
        if save_arrivals and record.metrics.get("send_offsets_s"):
            Path(save_arrivals).write_text(json.dumps({"send_offsets_s": record.metrics["send_offsets_s"]}))
        records.append(_done(record, store, db_path, bad_input))
    return records


__all__ = ["finetune", "infer", "pretrain", "serve"]
