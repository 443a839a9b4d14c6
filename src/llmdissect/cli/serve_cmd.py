"""`llmdissect bench serve` (load generator for OpenAI-compatible servers) and
`llmdissect serve-local` (a real `transformers serve` on 127.0.0.1 for it to measure)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from llmdissect.cli.options import DbOpt, DbPath, JsonOpt
from llmdissect.errors import UserError


def _probe_note(probe) -> None:
    """One line per probe as the search goes, on a terminal only (stderr stays one line for errors)."""
    from llmdissect.console import err_console, note

    if err_console.is_terminal:
        note(f"probe {probe.value:.4g}: {'meets' if probe.passed else 'misses'} the SLO")


def _rate(text: str) -> float:
    from llmdissect.workloads.serve.arrivals import parse_rates

    return parse_rates(text)[0]


def bench_serve(
    base_url: str = typer.Option(..., "--base-url", help="Server root, e.g. http://127.0.0.1:8000"),
    model: Optional[str] = typer.Option(None, help="Model name to request (default: the server's first)."),
    endpoint: str = typer.Option("completions", help="completions (/v1/completions) or chat (/v1/chat/completions)."),
    stream: bool = typer.Option(True, "--stream/--no-stream", help="Stream tokens (needed for TTFT/ITL)."),
    num_prompts: int = typer.Option(100, min=1, help="Requests to send."),
    input_len: int = typer.Option(128, min=1, help="Tokens per synthetic prompt (exact, by --tokenizer)."),
    output_len: Optional[int] = typer.Option(None, min=1, help="max_tokens per request (default 128, or the "
                                             "dataset reply's length)."),
    dataset: Optional[Path] = typer.Option(None, help="ShareGPT-style JSON/JSONL file (read locally)."),
    tokenizer: Optional[Path] = typer.Option(None, help="Local tokenizer folder (default: --model if a folder)."),
    request_rate: str = typer.Option("inf", help="Requests per second (Poisson; gamma with --burstiness), or inf."),
    burstiness: float = typer.Option(1.0, help="Gamma shape of the gaps: 1 Poisson, <1 burstier."),
    max_concurrency: Optional[int] = typer.Option(None, min=1, help="At most C requests in flight (closed loop)."),
    arrivals: Optional[Path] = typer.Option(None, help="Replay send offsets from a JSON file or stored record."),
    sweep_rates: Optional[str] = typer.Option(None, help="Comma-separated rates: one record per rate."),
    slo: Optional[str] = typer.Option(None, help="SLOs, seconds: ttft=0.5,tpot=0.05 (each request, for goodput), "
                                      "ttft_p99=0.5,tpot_p99=0.05 (percentiles), or a preset: "
                                      "mlperf-llama2-70b[-interactive], mlperf-llama3.1-8b[-interactive], ..."),
    find_max_rate: bool = typer.Option(False, "--find-max-rate", help="Search the highest request rate whose "
                                       "steady probe meets every --slo target (one record: probes and verdict)."),
    find_max_concurrency: bool = typer.Option(False, "--find-max-concurrency", help="Search the highest "
                                              "concurrency cap (rate inf) that meets every --slo target."),
    search_start: float = typer.Option(1.0, help="Capacity search: first rate (req/s) or concurrency probed."),
    search_low: float = typer.Option(0.05, help="Capacity search: lowest value tried before the SLO is "
                                     "called unmeetable."),
    search_high: float = typer.Option(1024.0, help="Capacity search: highest value tried."),
    search_precision: float = typer.Option(0.1, help="Capacity search: stop when passing and failing rates "
                                           "differ by at most this fraction (concurrency: by 1)."),
    warmup_requests: int = typer.Option(5, min=0, help="Capacity search: requests of each probe left out of "
                                        "its SLO check (each probe sends --num-prompts)."),
    max_probes: int = typer.Option(16, min=2, help="Capacity search: probes at most."),
    server_kind: str = typer.Option("auto", help="auto (probe), vllm, sglang, llamacpp, transformers, openai."),
    turns: int = typer.Option(1, min=1, help="Turns per session; >1: --num-prompts sessions, each turn sending "
                              "the whole conversation so far plus a new --input-len message."),
    think_time_s: float = typer.Option(0.0, min=0, help="Seconds between an answer and the session's next turn."),
    shared_prefixes: int = typer.Option(0, min=0, help="Distinct shared system prompts (0: none)."),
    prefix_len: int = typer.Option(64, min=1, help="Tokens of each shared prefix."),
    prefix_fraction: float = typer.Option(1.0, min=0, max=1, help="Fraction of requests that carry a shared "
                                          "prefix (exactly, rounded)."),
    trace: Optional[Path] = typer.Option(None, help="Replay a trace file: its arrival times and lengths "
                                         "(Mooncake JSONL, Azure CSV, BurstGPT CSV; first --num-prompts rows)."),
    trace_format: str = typer.Option("auto", help="auto, mooncake, azure or burstgpt."),
    time_scale: float = typer.Option(1.0, min=0, help="Trace gaps times this: 1 as recorded, 0.5 twice as fast."),
    trace_block_tokens: int = typer.Option(512, min=1, help="Prompt tokens per Mooncake hash id."),
    usd_per_hour: Optional[float] = typer.Option(None, min=0, help="Price of the serving hardware, USD/hour: "
                                                 "the record states USD per million input and output tokens."),
    seed: int = typer.Option(0, help="Seed of prompts and arrivals."),
    timeout_s: float = typer.Option(300.0, help="Per-request time limit, seconds."),
    api_key: Optional[str] = typer.Option(None, envvar="OPENAI_API_KEY", show_envvar=True, show_default=False,
                                          help="Sent as a bearer token, never stored."),
    save_arrivals: Optional[Path] = typer.Option(None, help="Write the realised send offsets here (for --arrivals)."),
    db: DbPath = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Measure an OpenAI-compatible server under load: TTFT, TPOT, ITL, latency, throughput,
    goodput. With --json: one record on stdout; with --sweep-rates, one record per line (JSON Lines)."""
    import json

    from llmdissect.cli.recording import finish
    from llmdissect.cli.serve_show import show_capacity, show_run
    from llmdissect.config import parse_config
    from llmdissect.results.store import check_writable
    from llmdissect.workloads.serve.arrivals import parse_rates
    from llmdissect.workloads.serve.capacity import CapacitySearch, search_over
    from llmdissect.workloads.serve.capacity_run import capacity_record
    from llmdissect.workloads.serve.client import SERVER_KINDS
    from llmdissect.workloads.serve.metrics import parse_slo
    from llmdissect.workloads.serve.plan import preflight
    from llmdissect.workloads.serve.record import ProgressBar, serve_record
    from llmdissect.workloads.serve.serve_config import ENDPOINTS, ServeConfig

    db_path = check_writable(db)
    if endpoint not in ENDPOINTS:
        raise UserError(f"--endpoint must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}")
    if server_kind not in SERVER_KINDS:
        raise UserError(f"--server-kind must be one of {', '.join(SERVER_KINDS)}, got {server_kind!r}")
    if not base_url.startswith(("http://", "https://")):
        raise UserError(f"--base-url must start with http:// or https://, got {base_url!r}")
    rates = parse_rates(sweep_rates) if sweep_rates else [_rate(request_rate)]
    slos = parse_slo(slo)
    over = search_over(find_max_rate, find_max_concurrency, sweep_rates)
    exit_code = 0
    for rate in rates:
        cfg = parse_config(ServeConfig, base_url=base_url, model=model, endpoint=endpoint, stream=stream,
                           num_prompts=num_prompts, input_len=input_len, output_len=output_len,
                           dataset=str(dataset) if dataset else None,
                           tokenizer=str(tokenizer) if tokenizer else None, request_rate=rate, burstiness=burstiness,
                           max_concurrency=max_concurrency, arrivals=str(arrivals) if arrivals else None, seed=seed,
                           server_kind=server_kind, slo=slos, timeout_s=timeout_s, turns=turns,
                           think_time_s=think_time_s, shared_prefixes=shared_prefixes, prefix_len=prefix_len,
                           prefix_fraction=prefix_fraction, trace=str(trace) if trace else None,
                           trace_format=trace_format, time_scale=time_scale, trace_block_tokens=trace_block_tokens,
                           usd_per_hour=usd_per_hour)
        preflight(cfg)
        if over:
            search_cfg = parse_config(CapacitySearch, over=over, search_start=search_start, search_low=search_low,
                                      search_high=search_high, search_precision=search_precision,
                                      warmup_requests=warmup_requests, max_probes=max_probes)
            record = capacity_record(cfg, search_cfg, api_key=api_key, on_probe=_probe_note)
            finish(record, db_path, json_out, show_capacity)
            return
        label = f"rate {'inf' if math.isinf(rate) else f'{rate:g}'}/s"
        with ProgressBar(f"serve {label}", num_prompts) as bar:
            record, bad_input = serve_record(cfg, api_key=api_key, on_done=bar.update)
        if save_arrivals and record.metrics.get("send_offsets_s"):
            save_arrivals.write_text(json.dumps({"send_offsets_s": record.metrics["send_offsets_s"]}))
        try:
            finish(record, db_path, json_out, show_run, user_error=bad_input)
        except typer.Exit as e:  # failed run: the sweep goes on, the exit code says it
            exit_code = exit_code or e.exit_code
    if exit_code:
        raise typer.Exit(exit_code)


def serve_local(
    model: str = typer.Option("tiny-llama", help="Model spec (random weights) to serve."),
    port: int = typer.Option(8000, help="Port on 127.0.0.1."),
    threads: Optional[int] = typer.Option(None, min=1, help="Server threads (OMP_NUM_THREADS); default cores - 1."),
    seed: int = typer.Option(0, help="Seed of the random weights and the tokenizer."),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm | transformers (default: vllm where its "
                                         "environment is installed, `make vllm`; else transformers)."),
    continuous_batching: bool = typer.Option(True, "--continuous-batching/--no-continuous-batching",
                                             help="transformers: continuous batching."),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="vllm: sequences the scheduler runs at once."),
    max_num_batched_tokens: int = typer.Option(1024, "--max-num-batched-tokens",
                                               help="vllm: tokens one scheduler step may run."),
    max_model_len: int = typer.Option(1024, "--max-model-len", help="vllm: longest sequence (prompt and output)."),
    chunked_prefill: bool = typer.Option(True, "--chunked-prefill/--no-chunked-prefill", help="vllm."),
    prefix_caching: bool = typer.Option(True, "--prefix-caching/--no-prefix-caching", help="vllm."),
    kv_cache_gib: int = typer.Option(1, "--kv-cache-gib", min=1, help="vllm: KV-cache space on a CPU, GiB."),
) -> None:
    """Serve a model spec with vLLM or `transformers serve` on 127.0.0.1 (offline) until Ctrl-C."""
    import signal
    import sys

    from llmdissect.console import console, note
    from llmdissect.specs.hardware import usable_cores
    from llmdissect.workloads.serve.local_server import ENGINE_NAMES, start_server
    from llmdissect.workloads.serve.vllm_engine import VllmSettings, require_vllm, vllm_python

    # `kill PID` must stop the server too (it runs in its own process group): SIGTERM -> SystemExit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    threads = threads or max(1, usable_cores() - 1)
    engine = engine or ("vllm" if vllm_python() is not None else "transformers")
    if engine == "vllm":
        require_vllm()  # before anything is printed: a missing environment is one line
    settings = VllmSettings(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                            max_model_len=max_model_len, enable_chunked_prefill=chunked_prefill,
                            enable_prefix_caching=prefix_caching, kv_cache_gib=kv_cache_gib)
    name = ENGINE_NAMES.get(engine, engine)
    note(f"starting {name} for {model} ({threads} thread(s))" + ("; vLLM takes a minute or two" if engine == "vllm"
                                                                 else "") + "...")
    server = start_server(model, port=port, threads=threads, seed=seed, continuous_batching=continuous_batching,
                          engine=engine, vllm_settings=settings)
    try:
        console.print(f"serving {model} at {server.base_url} with {name} (model id {server.model_name}, "
                      f"log {server.log_path})")
        console.print(f"measure it: llmdissect bench serve --base-url {server.base_url} --request-rate 2 "
                      f"--num-prompts 20 --input-len 64 --output-len 32")
        code = server.process.wait()
        raise UserError(f"{name} exited with code {code} (log: {server.log_path})")
    finally:
        server.stop()


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("serve")(bench_serve)
    app.command("serve-local")(serve_local)
