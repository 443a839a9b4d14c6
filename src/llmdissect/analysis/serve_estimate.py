"""`estimate serve`: a serving load simulated on the calibrated step-time model, as a record
with the metric names of `bench serve` (so `validate` pairs the two).

The load is what `bench serve` would send: `num_prompts` requests of `input_len` prompt and
`output_len` output tokens, sent at Poisson / gamma times (workloads.serve.arrivals, the same
generator and seed) or replayed from a file, optionally closed-loop (`max_concurrency`); or a
trace's requests (`trace`: their times, lengths and Mooncake's shared blocks, as
`bench serve --trace` sends them; trace_requests).
`replicas` engines each run the scheduler profile on gpus / replicas devices with `tp`,
requests dealt to them in turn. Each request's token times come from perfmodel.servesim;
the metrics are computed by the same code as a measured run's (workloads.serve.metrics),
each token taken as its own streamed chunk.
"""
from __future__ import annotations

import math
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.perfmodel.estimate import Estimate
from llmdissect.perfmodel.request import EstimateRequest

DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_PROMPTS = 128, 128, 100


def _offsets(r: EstimateRequest, n: int) -> list[float]:
    from pathlib import Path

    from llmdissect.workloads.serve.arrivals import gamma_offsets, load_offsets

    if r.arrivals:
        offsets = load_offsets(Path(r.arrivals))
        if len(offsets) < n:
            raise UserError(f"arrivals file {r.arrivals}: {len(offsets)} offsets for {n} requests")
        return offsets[:n]
    rate = math.inf if r.request_rate is None else float(r.request_rate)
    return gamma_offsets(n, rate, r.burstiness if r.burstiness is not None else 1.0, r.seed or 0)


def trace_requests(rows: list, block_tokens: int, time_scale: float) -> list:
    """SimRequests of trace rows (workloads.serve.traces): sent at the recorded times less the
    first, times `time_scale`; a length of 0 counted as 1, as bench serve sends it. A request
    shares with the others the longest run of leading hash ids that another request in the
    trace also starts with (bench serve makes equal ids equal blocks of `block_tokens`
    tokens): one prefix-cache entry per such run. Approximation: runs of different lengths
    of one chain are separate entries, where an engine's block cache would share their
    common blocks."""
    from llmdissect.perfmodel.servesim import SimRequest
    from llmdissect.workloads.serve.traces import trace_offsets

    counts: dict[tuple, int] = {}
    for row in rows:
        for k in range(1, len(row.hash_ids) + 1):
            counts[tuple(row.hash_ids[:k])] = counts.get(tuple(row.hash_ids[:k]), 0) + 1
    ids: dict[tuple, int] = {}
    out = []
    for row, sent in zip(rows, trace_offsets(rows, time_scale), strict=True):
        n_in, n_out = max(1, row.input_len), max(1, row.output_len)
        shared = next((tuple(row.hash_ids[:k]) for k in range(len(row.hash_ids), 0, -1)
                       if counts[tuple(row.hash_ids[:k])] > 1), ())
        prefix_len = min(len(shared) * block_tokens, n_in)
        prefix_id = ids.setdefault(shared, len(ids)) if shared and prefix_len else -1
        out.append(SimRequest(sent, n_in, n_out, prefix_id, prefix_len if prefix_id >= 0 else 0))
    return out


def _profile(r: EstimateRequest, is_cpu: bool):
    from llmdissect.perfmodel.serveprofiles import get_profile

    base = get_profile(r.profile or ("transformers" if is_cpu else "vllm"))
    return base.with_overrides(max_num_seqs=r.max_num_seqs, max_batched_tokens=r.max_batched_tokens,
                               block_size=r.block_size, num_blocks=r.num_blocks, prefix_caching=r.prefix_caching)


def _cpu_threads_machine(mach, profile_data: dict[str, Any], threads: int, notes: list[str], dtype: str):
    """The CPU as a server of `threads` threads sees it: `threads` of the cores `peak` measured
    with (compute scales with cores), and the bandwidth `peak` measured with one thread where
    the server has one (one thread streams more than its share of what all of them do), else
    the same share of it. With one thread, its GEMMs at the grid peak measured with one
    thread where there is one (torch runs a product of a few rows on one thread whatever it
    is given: at the share of the all-thread grid, decode's products cost twice what they do)."""
    from dataclasses import replace

    from llmdissect.perfmodel.ceilings import one_thread_gemm_grid

    section = profile_data.get("cpu") or {}
    measured_with = int(section.get("threads") or 0)
    c = mach.ceilings
    if not measured_with or threads >= measured_with:
        return mach
    share = threads / measured_with
    one = section.get("memory_bandwidth_one_thread_bytes_per_s")
    bandwidth = float(one) if threads == 1 and one else c.memory_bandwidth_bytes_per_s * share
    grid = one_thread_gemm_grid(section, dtype) if threads == 1 and c.gemm_grid else ()
    notes.append(f"server threads: {threads} of the {measured_with} peak measured with: {share:.0%} of its peak, "
                 + ("the bandwidth peak measured with one thread" if threads == 1 and one else
                    f"{share:.0%} of its bandwidth")
                 + (", GEMMs at the grid peak measured with one thread" if grid else ""))
    return replace(mach, ceilings=replace(c, peak_flops_per_s=c.peak_flops_per_s * share,
                                          memory_bandwidth_bytes_per_s=bandwidth, gemm_grid=grid or c.gemm_grid))


def run_serve_estimate(r: EstimateRequest, calibration=None, model=None,
                       offsets: list[float] | None = None, cpu_threads: int | None = None,
                       profile: dict[str, Any] | None = None) -> Estimate:
    """The simulated serving run of request `r` (kind serve), as an Estimate; `offsets`: the
    send times to replay (a measured run's own), instead of drawing or reading them;
    `cpu_threads`: the threads a CPU server runs with (_cpu_threads_machine); `profile`: a
    calibration profile to use instead of loading one ({}: the hardware catalogue alone, as
    `validate --published` asks)."""
    from llmdissect.calibration_profile import load_profile
    from llmdissect.dtypes import dtype_bytes
    from llmdissect.perfmodel import weights as wt
    from llmdissect.perfmodel.ceilings import machine_for, with_weight_stream_scale
    from llmdissect.perfmodel.config import check_kv_dtype, kv_element_bytes
    from llmdissect.perfmodel.servesim import SimRequest, simulate
    from llmdissect.perfmodel.servestep import IterationTime, kv_blocks_that_fit
    from llmdissect.specs import get_model, resolve_platform
    from llmdissect.workloads.serve.metrics import parse_slo

    m = model or get_model(r.model)
    replicas = r.replicas or 1
    platform = resolve_platform(r.hardware, r.gpus)
    if platform.num_devices % replicas or (platform.num_devices // replicas) % r.tp:
        raise UserError(f"{platform.num_devices} devices do not split into {replicas} replica(s) of --tp {r.tp}")
    dtype = r.dtype or ("fp32" if platform.device.kind == "cpu" else "bf16")
    profile_data = profile if profile is not None else load_profile(calibration, required=calibration is not None)
    mach = machine_for(platform, dtype, profile_data, explicit=calibration is not None)
    if mach.ceilings is None:
        raise UserError(f"no time estimate for {platform.device.name}: its peaks are unknown (run `llmdissect peak`)")
    thread_notes: list[str] = []
    if cpu_threads and platform.device.kind == "cpu":
        mach = _cpu_threads_machine(mach, profile_data, cpu_threads, thread_notes, dtype)
    e = dtype_bytes(dtype)
    quant = wt.check_quant(r.quant)
    group = wt.check_group_size(quant, r.group_size or 0)
    weights = wt.model_weight_bytes(m, quant, e, group)
    mach = with_weight_stream_scale(mach, wt.weight_stream_scale(quant, platform.device.kind))
    sched = _profile(r, platform.device.kind == "cpu")
    kv_dtype = check_kv_dtype(r.kv_dtype or "auto", platform)
    kv_e = kv_element_bytes(kv_dtype, e)
    blocks = sched.num_blocks or kv_blocks_that_fit(m, mach, kv_e, r.tp, weights, sched.block_size)
    if blocks <= 0:
        raise UserError(f"{m.name} does not fit on {platform.device.name} with --tp {r.tp}: no memory for a KV cache")
    trace_notes: dict[str, Any] = {}
    if r.trace:
        requests, trace_notes = _trace(r)
        n = len(requests)
        n_in = round(sum(q.input_len for q in requests) / n)
        n_out = round(sum(q.output_len for q in requests) / n)
        longest = max(q.input_len + q.output_len for q in requests)
        if longest > m.max_position_embeddings:
            raise UserError(f"trace {r.trace}: a request of {longest} tokens is longer than {m.name} allows "
                            f"({m.max_position_embeddings} positions)")
        offsets = [q.arrival_s for q in requests]
    else:
        n = r.num_prompts or DEFAULT_PROMPTS
        n_in, n_out = r.input_len or DEFAULT_INPUT_LEN, r.output_len or DEFAULT_OUTPUT_LEN
        if n_in + n_out > m.max_position_embeddings:
            raise UserError(f"--input-len {n_in} + --output-len {n_out} is longer than {m.name} allows "
                            f"({m.max_position_embeddings} positions)")
        offsets = list(offsets[:n]) if offsets and len(offsets) >= n else _offsets(r, n)
        requests = [SimRequest(offsets[i], n_in, n_out) for i in range(n)]
    slo = parse_slo(r.slo)
    c = mach.ceilings
    engine_measured = sched.name == "transformers" and (c.serve_engine_step_s > 0 or c.serve_engine_seq_s > 0)
    step = IterationTime(m, mach, e, r.tp, wt.layer_read_bytes(m, quant, e, group), engine_measured, kv_e)
    per_replica: list[list[int]] = [list(range(i, n, replicas)) for i in range(replicas)]
    sims = []
    for idx in per_replica:
        reqs = [requests[i] for i in idx]
        cap = -(-r.max_concurrency // replicas) if r.max_concurrency else 0
        sims.append((idx, simulate(reqs, sched, blocks, step, max_concurrency=cap)))
    metrics = _metrics(sims, requests, slo)
    metrics.update(_engine_metrics(sims, blocks))
    config = {"model": m.name, "hardware": platform.name, "dtype": dtype, "tp": r.tp, "replicas": replicas,
              "quant": quant, "profile": sched.to_dict(), "num_prompts": n, "input_len": n_in, "output_len": n_out,
              "request_rate": None if r.trace else "inf" if r.request_rate is None or math.isinf(r.request_rate)
              else r.request_rate,
              "burstiness": r.burstiness if r.burstiness is not None else 1.0,
              "max_concurrency": r.max_concurrency, "arrivals": r.arrivals, "seed": r.seed or 0, "slo": slo,
              **trace_notes, "kind_estimated": mn.SERVE}
    if wt.group_size_key(group):
        config["group_size"] = group
    if kv_dtype != "auto":
        config["kv_dtype"] = kv_dtype
    notes = [f"scheduler: {sched.name} ({sched.source})",
             f"KV cache: {blocks} blocks of {sched.block_size} tokens"
             + (" (the profile's)" if sched.num_blocks else " (what 90 % of the memory holds beside the weights)"),
             "iteration time: the calibrated step model (GEMMs at the batch's rows, attention over the "
             "contexts, fixed costs), plus the engine's own cost: "
             + (f"{c.serve_engine_step_s * 1e3:.2f} ms an iteration, {c.serve_engine_layer_s * 1e3:.3f} ms a layer "
                f"and {c.serve_engine_seq_s * 1e3:.3f} ms a sequence (transformers' engine, measured by peak)"
                if engine_measured else
                f"{c.generate_step_s * 1e3:.2f} ms an iteration (generate's, measured by peak)"
                if c.generate_step_s else "none measured (0)"), *thread_notes]
    return Estimate(mn.SERVE, config, metrics, notes)


def _trace(r: EstimateRequest) -> tuple[list, dict[str, Any]]:
    """The trace's requests (its first `num_prompts` where given) and what the config says of it."""
    from pathlib import Path

    from llmdissect.workloads.serve.traces import MOONCAKE_BLOCK_TOKENS, read_trace, zero_lengths

    clash = [o for o, on in (("--arrivals", r.arrivals), ("--request-rate", r.request_rate is not None),
                             ("--input-len", r.input_len), ("--output-len", r.output_len)) if on]
    if clash:
        raise UserError(f"--trace sets the arrivals and the lengths; it does not go with {', '.join(clash)}")
    fmt, rows = read_trace(Path(r.trace), r.trace_format or "auto")
    rows = rows[:r.num_prompts] if r.num_prompts else rows
    scale = 1.0 if r.time_scale is None else r.time_scale
    block = r.trace_block_tokens or MOONCAKE_BLOCK_TOKENS
    requests = trace_requests(rows, block, scale)
    return requests, {"trace": r.trace, "trace_format_read": fmt, "trace_rows": len(rows), "time_scale": scale,
                      "trace_block_tokens": block, "trace_zero_lengths_sent_as_1": zero_lengths(rows)}


def _metrics(sims: list, requests: list, slo: dict[str, float]) -> dict[str, Any]:
    """bench serve's metrics (workloads.serve.metrics.summarize) of the simulated requests."""
    from llmdissect.workloads.serve.metrics import RequestResult, summarize

    results: list[RequestResult] = [RequestResult(index=i) for i in range(len(requests))]
    end = 0.0
    for idx, sim in sims:
        for j, i in enumerate(idx):
            sent, times = sim.send_s[j], sim.token_times[j]
            rel = [t - sent for t in times]
            q = requests[i]
            results[i] = RequestResult(index=i, ok=True, send_offset_s=sent, ttft_s=rel[0], e2e_s=rel[-1],
                                       chunk_times_s=rel, prompt_tokens=q.input_len, output_tokens=len(rel),
                                       output_tokens_source="simulated", requested_output_len=q.output_len,
                                       input_len=q.input_len)
            end = max(end, times[-1])
    out = summarize(results, end, slo)
    out.pop("output_lens", None)
    out["send_offsets_s"] = [r.send_offset_s for r in results]
    return out


def _engine_metrics(sims: list, blocks: int) -> dict[str, Any]:
    """What the engine did: iterations, batch sizes, KV-cache use, preemptions, prefix hits."""
    iterations = sum(s.iterations for _, s in sims)
    sizes = [b for _, s in sims for b in s.batch_sizes]
    return {mn.ENGINE: {mn.ITERATIONS: iterations,
                              mn.MEAN_BATCH_SIZE: sum(sizes) / len(sizes) if sizes else 0.0, mn.KV_BLOCKS: blocks,
                              mn.KV_CACHE_USE_MEAN: max(s.kv_use_mean for _, s in sims),
                              mn.KV_CACHE_USE_MAX: max(s.kv_use_max for _, s in sims),
                              mn.PREEMPTIONS: sum(s.preemptions for _, s in sims),
                              mn.PREFIX_HIT_TOKENS: sum(s.prefix_hit_tokens for _, s in sims)}}


SERVED_KEYS = ("model", "hardware", "engine")
"""What a measured serve record's `config.served` must say for validate to simulate it."""


def estimate_measured_serve(config: dict[str, Any], metrics: dict[str, Any] | None = None,
                            calibration=None) -> Estimate:
    """The simulation of a measured `bench serve` run's load on the server it names
    (`config.served`: model, hardware, engine, threads and the scheduler settings it ran with),
    its requests sent when the run sent them (`metrics.send_offsets_s`, where recorded)."""
    from llmdissect.perfmodel.request import estimate_request

    served = config.get("served")
    if not isinstance(served, dict) or any(k not in served for k in SERVED_KEYS):
        raise UserError("the record does not say which model, hardware and engine served it (config.served; "
                        "the quick suite's serve step writes it)")
    rate = config.get("request_rate")
    trace = config.get("trace")
    if trace:  # the trace sets the arrivals and the lengths
        trace_opts = dict(trace=str(trace), trace_format=config.get("trace_format"),
                          time_scale=config.get("time_scale"), trace_block_tokens=config.get("trace_block_tokens"))
        config = {k: v for k, v in config.items() if k not in ("request_rate", "input_len", "output_len", "arrivals")}
        rate = None
    else:
        trace_opts = {}
    request = estimate_request(
        mn.SERVE, model=served["model"], hardware=served["hardware"], dtype=served.get("dtype"),
        profile=served["engine"], max_num_seqs=served.get("max_num_seqs"),
        max_batched_tokens=served.get("max_batched_tokens"), block_size=served.get("block_size"),
        num_blocks=served.get("num_blocks"), num_prompts=config.get("num_prompts"),
        input_len=config.get("input_len"), output_len=config.get("output_len"),
        request_rate=None if trace else math.inf if rate in (None, "inf") else float(rate),
        burstiness=config.get("burstiness"), **trace_opts,
        max_concurrency=config.get("max_concurrency"), arrivals=config.get("arrivals"), seed=config.get("seed"),
        slo=",".join(f"{k.removesuffix('_s')}={v}" for k, v in (config.get("slo") or {}).items()) or None)
    sent = (metrics or {}).get("send_offsets_s")
    threads = int(served.get("threads") or 0) or None if served["hardware"] == "cpu" else None
    return run_serve_estimate(request, calibration, offsets=sent if isinstance(sent, list) else None,
                              cpu_threads=threads)
