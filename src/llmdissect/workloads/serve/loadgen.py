"""One serving benchmark run: probe, build requests, send them on schedule, summarise.

Single process, one asyncio loop: request bodies are serialised before the clock starts, so
the loop only sends, reads and timestamps. The client's own CPU time is recorded.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmdissect.workloads.serve import arrivals, client, metrics, prompts
from llmdissect.workloads.serve.serve_config import ENDPOINTS, ServeConfig

API_KEY_ENV = "OPENAI_API_KEY"
MAX_WARM_CONNECTIONS = 512


@dataclass
class RunOutcome:
    results: list[metrics.RequestResult]
    metrics: dict[str, Any]
    config_extra: dict[str, Any]
    server: dict[str, Any]
    start_perf_s: float = 0.0
    """time.perf_counter() (CLOCK_MONOTONIC on Linux) at the start of the run: send offsets count from it."""


async def _sleep_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def _warm_connections(session: Any, url: str, headers: dict[str, str], n: int) -> None:
    """Open up to `n` keep-alive connections before the clock starts (cheap GETs), so that a
    burst of requests times the server, not TCP handshakes and the client's first-use setup."""
    import aiohttp

    async def get() -> None:
        try:
            async with session.get(url, headers=headers) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError):
            pass

    await asyncio.gather(*(get() for _ in range(n)))


def _bodies(cfg: ServeConfig, model: str, items: list[prompts.Prompt], extras: dict[str, Any]) -> list[bytes]:
    out = []
    for p in items:
        payload: dict[str, Any] = {"model": model, "max_tokens": p.output_len, "stream": cfg.stream, **extras}
        if cfg.endpoint == "chat":
            payload["messages"] = [{"role": "user", "content": p.text}]
        else:
            payload["prompt"] = p.text
        if cfg.stream:
            payload["stream_options"] = {"include_usage": True}
        out.append(json.dumps(payload).encode())
    return out


async def run_async(cfg: ServeConfig, api_key: str | None = None,
                    on_done: Callable[[int, int], None] | None = None) -> RunOutcome:
    """Run the benchmark; `on_done(done, total)` is called as requests finish."""
    import aiohttp

    headers = {"Content-Type": "application/json"}
    key = api_key or os.environ.get(API_KEY_ENV)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    base = cfg.base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    endpoint = ENDPOINTS[cfg.endpoint]
    tok = prompts.find_tokenizer(cfg.tokenizer, cfg.model)
    limit = cfg.max_concurrency or 0
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s, sock_connect=10)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit), timeout=timeout) as session:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=min(cfg.timeout_s, 60))) as probe_s:
            model, extras, server = await client.probe(probe_s, base, endpoint, cfg.model,
                                                       headers, dict(client.SERVER_KINDS[cfg.server_kind]))
        if tok is None and (Path(model) / "tokenizer.json").is_file():
            tok = prompts.Tok(Path(model))
        if cfg.dataset:
            items = prompts.dataset_prompts(Path(cfg.dataset), cfg.num_prompts, tok, cfg.output_len, cfg.seed)
        else:
            if tok is None:
                from llmdissect.errors import UserError

                raise UserError("synthetic prompts need the model's tokenizer: --tokenizer FOLDER (or --dataset FILE)")
            items = prompts.synthetic_prompts(tok, cfg.num_prompts, cfg.input_len,
                                              cfg.output_len or prompts.DEFAULT_OUTPUT_LEN, cfg.seed)
        offsets = (arrivals.load_offsets(Path(cfg.arrivals))[:cfg.num_prompts] if cfg.arrivals else
                   arrivals.gamma_offsets(cfg.num_prompts, cfg.request_rate, cfg.burstiness, cfg.seed))
        if len(offsets) < len(items):
            items = items[:len(offsets)]
        bodies = _bodies(cfg, model, items, extras)
        url = base + endpoint
        results = [metrics.RequestResult(index=i, requested_output_len=p.output_len, input_len=p.input_len)
                   for i, p in enumerate(items)]
        sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        done_at: list[float] = []

        async def one(i: int) -> None:
            r = results[i]
            if sem is not None:
                await sem.acquire()
            try:
                r.send_offset_s = time.perf_counter() - start
                await client.send(session, url, bodies[i], headers, cfg.stream, r, tok)
                done_at.append(time.perf_counter() - start)
            finally:
                if sem is not None:
                    sem.release()
            if on_done:
                on_done(len(done_at), len(results))

        warm = min(len(results), cfg.max_concurrency or len(results), MAX_WARM_CONNECTIONS)
        await _warm_connections(session, base + "/v1/models", headers, warm)
        cpu0 = time.process_time()
        start = time.perf_counter()
        tasks = []
        for i, off in enumerate(offsets[:len(results)]):
            await _sleep_until(start + off)
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.gather(*tasks)
        cpu_s = time.process_time() - cpu0
    sent = sorted(r.send_offset_s for r in results)
    duration = (max(done_at) - sent[0]) if done_at and sent else 0.0
    m = metrics.summarize(results, duration, cfg.slo)
    m.update({
        "request_rate_realised_per_s": arrivals.realised_rate(sent),
        "client_cpu_s": cpu_s,  # time.process_time over the send loop (this process, all threads)
        "client_cpu_s_per_request": cpu_s / len(results) if results else None,
        "send_offsets_s": [r.send_offset_s for r in results],
        "scheduled_offsets_s": list(offsets[:len(results)]),
    })
    extra = {"model": model, "warm_connections": warm, "sent_fields": sorted(extras),
             "fixed_output_len": "ignore_eos" in extras,
             "output_tokens_counted_by": m["output_tokens_source"], "tokenizer": tok.path if tok else None,
             "input_len_exact": (not cfg.dataset and all(p.input_len == cfg.input_len for p in items))}
    return RunOutcome(results, m, extra, server, start)
