"""The public Python API for notebooks and scripts: `llmdissect.estimate(...)`.

What `llmdissect estimate` does, without typer and without printing: the same request
(`perfmodel.request.EstimateRequest`), the same analytical model, the same record. Measured
runs are in `llmdissect.bench`, stored records in `llmdissect.results.load`. No torch.
"""
from __future__ import annotations

import os

from llmdissect.results.schema import RunRecord


def estimate(kind: str, *, model: str, hardware: str, gpus: int | None = None, dtype: str | None = None,
             micro_batch: int | None = None, seq: int | None = None, grad_accum: int | None = None,
             zero: int | None = None, offload: str | None = None, recompute: str | None = None,
             attn: str = "sdpa", tp: int = 1, pp: int | None = None, pp_virtual: int | None = None,
             pp_flushes: int | None = None, cp: int | None = None, ep: int | None = None,
             optimizer: str | None = None, precision: str | None = None, engine: str | None = None,
             loss: str | None = None, float8: str | None = None, kernels: str | None = None,
             sp: bool | None = None, async_tp: bool | None = None, prefetch: bool | None = None,
             head: str | None = None, held_logits: str | None = None,
             accumulate: str | None = None, lora_rank: int | None = None, lora_targets: str | None = None,
             lora_dropout: str | None = None,
             quant: str = "none", group_size: int | None = None, kv_dtype: str | None = None,
             batch: int | None = None, input_len: int | None = None, output_len: int | None = None,
             cache: str | None = None, profile: str | None = None, max_num_seqs: int | None = None,
             max_batched_tokens: int | None = None, block_size: int | None = None, num_blocks: int | None = None,
             prefix_caching: bool | None = None, replicas: int | None = None, num_prompts: int | None = None,
             request_rate: float | None = None, burstiness: float | None = None,
             max_concurrency: int | None = None, arrivals: str | None = None, seed: int | None = None,
             slo: str | None = None, trace: str | os.PathLike[str] | None = None,
             trace_format: str | None = None, time_scale: float | None = None,
             trace_block_tokens: int | None = None, calibration: str | os.PathLike[str] | None = None,
             store: bool = True, db: str | os.PathLike[str] | None = None) -> RunRecord:
    """Predict per-device memory, step time, throughput and MFU of a configuration (no run).

    The same as `llmdissect estimate KIND --model M --hardware H ... --json`: the options are
    those of the command (None takes the default shown by `llmdissect estimate --help`), and
    the result is the `RunRecord` that `--json` prints (`kind="estimate"`,
    `source="estimated"`, `config["kind_estimated"]` = `kind`). Its `metrics` hold
    `memory.<x>_bytes`, `time.<x>_s`, `tokens_per_s`, `mfu`, `fits`, `model_flops_per_token`
    and `notes` (the assumptions behind them), as docs/metrics.md defines them; a `serve`
    estimate holds `bench serve`'s metrics (ttft_s, tpot_s, ... as Stats) and `engine`.

    Args:
        kind: pretrain | finetune | infer | serve.
        model: a model preset (`llmdissect models`), model TOML or config.json.
        hardware: a device (a800, h100, cpu) or a platform (8xa800).
        gpus, dtype, micro_batch, seq, grad_accum, zero, offload, recompute, attn, tp, pp, pp_virtual, pp_flushes,
            cp, ep, optimizer, precision, engine, loss, float8, kernels, sp, async_tp, prefetch, head, held_logits,
            accumulate,
            lora_rank, lora_targets,
            lora_dropout, quant, group_size, kv_dtype, batch, input_len, output_len, cache,
            profile, max_num_seqs, max_batched_tokens, block_size, num_blocks, prefix_caching, replicas,
            num_prompts, request_rate, burstiness, max_concurrency, arrivals, seed, slo, trace,
            trace_format, time_scale, trace_block_tokens: the options of
            `llmdissect estimate` (see `perfmodel.request.EstimateRequest`); an option of another
            kind (training-only for infer, and so on) is refused.
        calibration: a calibration profile (default: this machine's, when one was measured).
        store: also write the record to the results store, as the command does.
        db: the results store (default: $LLMDISSECT_DB or .llmdissect/results.db).

    Raises:
        llmdissect.errors.UserError: bad input (unknown model or hardware, an option that
            does not apply, a missing calibration file, ...), with one clear line.
    """
    from llmdissect.perfmodel.request import estimate_env, estimate_request, run_estimate

    options = dict(gpus=gpus, dtype=dtype, micro_batch=micro_batch, seq=seq, grad_accum=grad_accum, zero=zero,
                   offload=offload, recompute=recompute, attn=attn, tp=tp, pp=pp, pp_virtual=pp_virtual,
                   pp_flushes=pp_flushes, cp=cp, ep=ep, optimizer=optimizer, precision=precision, engine=engine,
                   loss=loss, float8=float8, kernels=kernels, sp=sp, async_tp=async_tp, prefetch=prefetch, head=head,
                   held_logits=held_logits, accumulate=accumulate, lora_rank=lora_rank,
                   lora_targets=lora_targets, lora_dropout=lora_dropout, quant=quant,
                   group_size=group_size, kv_dtype=kv_dtype, batch=batch,
                   input_len=input_len,
                   output_len=output_len, cache=cache, profile=profile, max_num_seqs=max_num_seqs,
                   max_batched_tokens=max_batched_tokens, block_size=block_size, num_blocks=num_blocks,
                   prefix_caching=prefix_caching, replicas=replicas, num_prompts=num_prompts,
                   request_rate=request_rate, burstiness=burstiness, max_concurrency=max_concurrency,
                   arrivals=arrivals, seed=seed, slo=slo,
                   trace=None if trace is None else os.fspath(trace), trace_format=trace_format,
                   time_scale=time_scale, trace_block_tokens=trace_block_tokens)
    request = estimate_request(kind, model=model, hardware=hardware, **options)
    if request.kind == "serve":
        from llmdissect.analysis.serve_estimate import run_serve_estimate

        est = run_serve_estimate(request, calibration)
    else:
        est = run_estimate(request, calibration)
    record = est.to_record(estimate_env(calibration))
    if store:
        from llmdissect.results.store import open_store

        with open_store(db) as s:
            s.add(record)
    return record


__all__ = ["estimate"]
