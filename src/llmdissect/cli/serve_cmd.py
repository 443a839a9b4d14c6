"""`llmdissect bench serve` (load generator for OpenAI-compatible servers) and
`llmdissect serve-local` (a real `transformers serve` on 127.0.0.1 for it to measure)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt
from llmdissect.errors import UserError


def _show(record) -> None:
    from llmdissect.console import console, human_seconds, table

    m = record.metrics
    rows = []
    for key in (mn.TTFT_S, mn.TPOT_S, mn.ITL_S, mn.E2E_LATENCY_S):
        s = m.get(key)
        rows.append((key, *((human_seconds(s[q]) for q in ("mean", "median", "p90", "p99")) if s else "----")))
    rate = record.config.get("request_rate")
    console.print(f"serve {record.id}: {record.config.get('model')} /v1/{record.config.get('endpoint')} "
                  f"({'streamed' if record.config.get('stream') else 'not streamed'}), rate {rate}/s, "
                  f"concurrency {record.config.get('max_concurrency') or 'unlimited'}, "
                  f"{record.config.get('num_prompts')} requests")
    console.print(table(None, ["metric", "mean", "median", "p90", "p99"], rows))
    good = f", goodput {m[mn.GOODPUT_PER_S]:.3g} req/s" if m.get(mn.GOODPUT_PER_S) is not None else ""
    console.print(f"completed {m['completed']}, failed {m['failed']} in {m[mn.DURATION_S]:.2f} s: "
                  f"{m[mn.REQUEST_THROUGHPUT_PER_S]:.3g} req/s, {m[mn.OUTPUT_TOKENS_PER_S]:.4g} output tok/s, "
                  f"{m[mn.TOTAL_TOKENS_PER_S]:.4g} total tok/s{good}; realised rate "
                  f"{m['request_rate_realised_per_s'] or 0:.3g} req/s; client CPU "
                  f"{m['client_cpu_s_per_request'] * 1e3:.2f} ms/request; output tokens by {m['output_tokens_source']}")
    if m.get("output_len_mismatched"):
        console.print(f"note: {m['output_len_mismatched']} request(s) got another output length than asked "
                      f"(server cannot fix it: {not record.config.get('fixed_output_len')})")


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
    slo: Optional[str] = typer.Option(None, help="SLOs for goodput, seconds: ttft=0.5,tpot=0.05"),
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
    from llmdissect.config import parse_config
    from llmdissect.results.store import check_writable
    from llmdissect.workloads.serve.arrivals import parse_rates
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
                           trace_format=trace_format, time_scale=time_scale, trace_block_tokens=trace_block_tokens)
        preflight(cfg)
        label = f"rate {'inf' if math.isinf(rate) else f'{rate:g}'}/s"
        with ProgressBar(f"serve {label}", num_prompts) as bar:
            record, bad_input = serve_record(cfg, api_key=api_key, on_done=bar.update)
        if save_arrivals and record.metrics.get("send_offsets_s"):
            save_arrivals.write_text(json.dumps({"send_offsets_s": record.metrics["send_offsets_s"]}))
        try:
            finish(record, db_path, json_out, _show, user_error=bad_input)
        except typer.Exit as e:  # failed run: the sweep goes on, the exit code says it
            exit_code = exit_code or e.exit_code
    if exit_code:
        raise typer.Exit(exit_code)


def serve_local(
    model: str = typer.Option("tiny-llama", help="Model spec (random weights) to serve."),
    port: int = typer.Option(8000, help="Port on 127.0.0.1."),
    threads: Optional[int] = typer.Option(None, min=1, help="Server threads (OMP_NUM_THREADS); default cores - 1."),
    seed: int = typer.Option(0, help="Seed of the random weights and the tokenizer."),
    continuous_batching: bool = typer.Option(True, "--continuous-batching/--no-continuous-batching"),
) -> None:
    """Serve a model spec with `transformers serve` on 127.0.0.1 (offline) until Ctrl-C."""
    import signal
    import sys

    from llmdissect.console import console, note
    from llmdissect.specs.hardware import usable_cores
    from llmdissect.workloads.serve.local_server import start_server

    # `kill PID` must stop the server too (it runs in its own process group): SIGTERM -> SystemExit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    threads = threads or max(1, usable_cores() - 1)
    note(f"starting transformers serve for {model} ({threads} thread(s))...")
    server = start_server(model, port=port, threads=threads, seed=seed, continuous_batching=continuous_batching)
    try:
        console.print(f"serving {model} at {server.base_url} (model id {server.model_name}, log {server.log_path})")
        console.print(f"measure it: llmdissect bench serve --base-url {server.base_url} --request-rate 2 "
                      f"--num-prompts 20 --input-len 64 --output-len 32")
        code = server.process.wait()
        raise UserError(f"transformers serve exited with code {code} (log: {server.log_path})")
    finally:
        server.stop()


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("serve")(bench_serve)
    app.command("serve-local")(serve_local)
