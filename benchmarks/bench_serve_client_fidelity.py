"""How exactly does `bench serve` time a stream? An instrument, not a test double.

A deliberately simple token-streaming server (aiohttp, in a second process) sends each
stream's chunks on a known schedule, first chunk TTFT after the request arrives and then
one every ITL, and writes into every chunk the CLOCK_MONOTONIC time it was sent. The
client (llmdissect's own, unchanged) measures TTFT and ITL as always; we print how far they
are from the schedule and from the server's actual send times, at 1, 64 and 512 concurrent
streams, and the client's CPU seconds per request at concurrency 1.

    python benchmarks/bench_serve_client_fidelity.py [--streams 1,64,512] [--tokens 32]

Target (issue 7): median error under 1 ms at 64 streams.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TTFT_S, ITL_S = 0.050, 0.020


def serve(port: int, late_headers: bool = False) -> None:
    """The scheduled streaming server (runs in its own process). Like uvicorn-based servers
    (vLLM, SGLang, transformers serve) it sends the response headers when the request
    arrives; with `late_headers` (aiohttp's default) they go out with the first chunk."""
    from aiohttp import web

    async def models(_request):
        return web.json_response({"object": "list", "data": [{"id": "scheduled", "object": "model"}]})

    async def completions(request):
        arrived = time.monotonic()
        body = await request.json()
        n = int(body.get("max_tokens") or 16)
        usage = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
        if not body.get("stream"):
            return web.json_response({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                                      "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if not late_headers:
            await resp.write(b": stream open\n\n")  # an SSE comment flushes the headers now
        for i in range(n):
            delay = arrived + TTFT_S + i * ITL_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.monotonic()
            text = f" {arrived:.9f} {sent:.9f}"
            await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": text}]}).encode() + b"\n\n")
        last = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": usage}
        await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")  # then close, no [DONE]
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    web.run_app(app, host="127.0.0.1", port=port, backlog=4096, print=None, access_log=None)


def _start_server(late_headers: bool = False) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)] + ["--late-headers"] * late_headers,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the scheduled server did not start")


def _run(url: str, dataset: Path, streams: int, tokens: int, concurrency: int | None = None, n: int | None = None,
         arrivals: Path | None = None):
    from llmdissect.workloads.serve.loadgen import ServeConfig, run_async

    cfg = ServeConfig(base_url=url, model="scheduled", dataset=str(dataset), num_prompts=n or streams,
                      output_len=tokens, request_rate=float("inf"), max_concurrency=concurrency, timeout_s=120,
                      arrivals=str(arrivals) if arrivals else None)
    return asyncio.run(run_async(cfg))


def _errors(outcome):
    """Per request, in ms: TTFT and ITL minus the schedule (server delays included), and minus
    the truth from the server's send stamps (same CLOCK_MONOTONIC: the client's own error)."""
    ttft_sched, ttft_sent, itl_sched, itl_sent, late = [], [], [], [], []
    for r in outcome.results:
        if not r.ok:
            continue
        stamps = [tuple(map(float, t.split())) for t in r.chunk_texts]  # (arrived, sent) per chunk
        arrived = stamps[0][0]
        sent_at = outcome.start_perf_s + r.send_offset_s  # when the client sent the request
        ttft_sched.append((r.ttft_s - TTFT_S) * 1e3)
        ttft_sent.append((r.ttft_s - (stamps[0][1] - sent_at)) * 1e3)
        for i in range(1, len(stamps)):
            measured = r.chunk_times_s[i] - r.chunk_times_s[i - 1]
            itl_sched.append((measured - ITL_S) * 1e3)
            itl_sent.append((measured - (stamps[i][1] - stamps[i - 1][1])) * 1e3)
        late.extend((s - (arrived + TTFT_S + i * ITL_S)) * 1e3 for i, (_, s) in enumerate(stamps))
    return ttft_sched, ttft_sent, itl_sched, itl_sent, late


def _q(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--streams", default="1,64,512")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--late-headers", action="store_true",
                    help="the server sends its response headers with the first chunk (the harder case)")
    ap.add_argument("--cpu-requests", type=int, default=30, help="requests for the CPU-per-request figure")
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve, args.late_headers)
    proc, url = _start_server(args.late_headers)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dataset = Path(tmp) / "p.json"
            dataset.write_text(json.dumps([{"prompt": "hello"}]))
            print(f"schedule: TTFT {TTFT_S * 1e3:.0f} ms then one chunk every {ITL_S * 1e3:.0f} ms, "
                  f"{args.tokens} chunks; headers {'with the first chunk' if args.late_headers else 'at once'}; "
                  f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
            print(f"{'streams':>15} | {'TTFT err vs schedule ms':>24} | {'TTFT err vs sent ms':>20} | "
                  f"{'ITL err vs schedule ms':>23} | {'ITL err vs sent ms':>19} | {'server late ms':>15}")
            print(f"{'':>15} | {'median':>11} {'p99':>12} | {'median':>9} {'p99':>10} | {'median':>10} {'p99':>12} | "
                  f"{'median':>8} {'p99':>10} | {'median':>6} {'p99':>8}")
            for streams in [int(s) for s in args.streams.split(",")]:
                # aligned: all streams start at once, so their chunks arrive in bursts of `streams`
                # (the worst case); staggered: starts spread evenly over one ITL (replayed arrivals)
                stagger = Path(tmp) / f"stagger-{streams}.json"
                stagger.write_text(json.dumps([i * ITL_S / streams for i in range(streams)]))
                for mode, arrivals in (("aligned", None), ("staggered", stagger)):
                    out = _run(url, dataset, streams, args.tokens, arrivals=arrivals)
                    ts, tt, isch, isent, late = _errors(out)
                    bad = out.metrics["failed"]
                    print(f"{streams:>5} {mode:<9} | {statistics.median(ts):>11.3f} {_q(ts, .99):>12.3f} | "
                          f"{statistics.median(tt):>9.3f} {_q(tt, .99):>10.3f} | {statistics.median(isch):>10.3f} "
                          f"{_q(isch, .99):>12.3f} | {statistics.median(isent):>8.3f} {_q(isent, .99):>10.3f} | "
                          f"{statistics.median(late):>6.2f} {_q(late, .99):>8.2f}"
                          + (f"  ({bad} failed)" if bad else ""))
            out = _run(url, dataset, 1, args.tokens, concurrency=1, n=args.cpu_requests)
            m = out.metrics
            print(f"client CPU at concurrency 1: {m['client_cpu_s_per_request'] * 1e3:.2f} ms per request "
                  f"({args.tokens} streamed chunks each, {m['completed']} requests; target <= 20 ms)")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
