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

import llmdissect.metric_names as mn
from llmdissect.measure.energy import EnergyMeter
from llmdissect.workloads.cost import serving_cost
from llmdissect.workloads.serve import arrivals, client, metrics, prompts, server_metrics
from llmdissect.workloads.serve.plan import Plan, build_plan
from llmdissect.workloads.serve.serve_config import ENDPOINTS, ServeConfig
from llmdissect.workloads.serve.sessions import History

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


def _payload(cfg: ServeConfig, model: str, output_len: int, extras: dict[str, Any],
             prompt: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": model, "max_tokens": output_len, "stream": cfg.stream, **extras, **prompt}
    if cfg.stream:
        payload["stream_options"] = {"include_usage": True}
    return payload


def _prompt_fields(endpoint: str, p: prompts.Prompt) -> dict[str, Any]:
    """A single-turn request's prompt: the shared prefix (if any) then the text."""
    if endpoint == "chat":
        system = [{"role": "system", "content": p.prefix}] if p.prefix else []
        return {"messages": system + [{"role": "user", "content": p.text}]}
    return {"prompt": p.prefix + p.text}


def _bodies(cfg: ServeConfig, model: str, items: list[prompts.Prompt], extras: dict[str, Any]) -> list[bytes]:
    return [json.dumps(_payload(cfg, model, p.output_len, extras, _prompt_fields(cfg.endpoint, p))).encode()
            for p in items]


def _results(plan: Plan) -> list[metrics.RequestResult]:
    """One empty result per request, labelled with its session and turn or its shared prefix."""
    out = []
    for i, p in enumerate(plan.items):
        r = metrics.RequestResult(index=i, requested_output_len=p.output_len, input_len=p.input_len,
                                  prefix_id=p.prefix_id)
        if plan.sessions:
            turns = len(plan.sessions[0].turns)
            r.session, r.turn = divmod(i, turns)
            r.input_len = None if r.turn else p.input_len  # later turns carry the history too
        out.append(r)
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
            server.update(await server_metrics.identify(probe_s, base, headers))
        if tok is None and (Path(model) / "tokenizer.json").is_file():
            tok = prompts.Tok(Path(model))
        plan = build_plan(cfg, tok)
        url = base + endpoint
        results = _results(plan)
        sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        done_at: list[float] = []

        async def send(r: metrics.RequestResult, body: bytes) -> None:
            if sem is not None:
                await sem.acquire()
            try:
                r.send_offset_s = time.perf_counter() - start
                await client.send(session, url, body, headers, cfg.stream, r, tok)
                done_at.append(time.perf_counter() - start)
            finally:
                if sem is not None:
                    sem.release()
            if on_done:
                on_done(len(done_at), len(results))

        async def conversation(s: int) -> None:
            """One session's turns in order, each carrying the history (sessions.py)."""
            history = History()
            for t, turn in enumerate(plan.sessions[s].turns):
                r = results[s * cfg.turns + t]
                if t:
                    await asyncio.sleep(cfg.think_time_s)
                r.sent_prompt = history.request(cfg.endpoint, turn)
                await send(r, json.dumps(_payload(cfg, model, turn.output_len, extras, r.sent_prompt)).encode())
                if not r.ok:  # the conversation cannot go on without this answer
                    for later in results[s * cfg.turns + t + 1:(s + 1) * cfg.turns]:
                        later.error = f"turn {t} of the session failed"
                    return
                history.add(cfg.endpoint, turn, r.text)

        bodies = [] if plan.sessions else _bodies(cfg, model, plan.items, extras)
        for r, p in zip(results, plan.items):
            r.sent_prompt = None if plan.sessions else _prompt_fields(cfg.endpoint, p)
        n_starts = len(plan.sessions) if plan.sessions else len(results)
        warm = min(len(results), cfg.max_concurrency or len(results), MAX_WARM_CONNECTIONS)
        await _warm_connections(session, base + "/v1/models", headers, warm)
        scraper = scrape_task = None
        if server.get("metrics"):  # the baseline before the first request, then every interval
            scraper = server_metrics.Scraper(base + "/metrics", headers)
            await scraper.scrape()
        meter = EnergyMeter()
        meter.start()
        cpu0 = time.process_time()
        start = time.perf_counter()
        if scraper is not None:
            scraper.start = start
            scrape_task = asyncio.ensure_future(scraper.run())
        tasks = []
        for i, off in enumerate(plan.offsets[:n_starts]):
            await _sleep_until(start + off)
            tasks.append(asyncio.ensure_future(conversation(i) if plan.sessions else send(results[i], bodies[i])))
        await asyncio.gather(*tasks)
        if scraper is not None:
            scraper.stop()
            await scrape_task
        cpu_s = time.process_time() - cpu0
        joules = meter.stop()
    sent = sorted(r.send_offset_s for r in results if r.ok or not (r.error or "").startswith("turn "))
    duration = (max(done_at) - sent[0]) if done_at and sent else 0.0
    m = metrics.summarize(results, duration, cfg.slo)
    m.update({
        "request_rate_realised_per_s": arrivals.realised_rate(sent),
        "client_cpu_s": cpu_s,  # time.process_time over the send loop (this process, all threads)
        "client_cpu_s_per_request": cpu_s / len(results) if results else None,
        "send_offsets_s": [r.send_offset_s for r in results],
        "scheduled_offsets_s": list(plan.offsets[:n_starts]),
    })
    m.update(serving_cost(cfg.usd_per_hour, "--usd-per-hour", duration, m["input_tokens"], m["output_tokens"]))
    if scraper is not None:
        m[mn.SERVER_METRICS] = scraper.result()
    else:
        m[mn.SERVER_METRICS_NOT_AVAILABLE] = server.get("metrics_not_available") or "not scraped"
    if joules is None:
        m["energy_not_measured"] = meter.why_not
    else:
        m.update({mn.ENERGY_J: joules, "energy_sources": meter.sources,
                  mn.ENERGY_J_PER_OUTPUT_TOKEN: joules / m["output_tokens"] if m["output_tokens"] else None})
    extra = {"model": model, "warm_connections": warm, "sent_fields": sorted(extras),
             "fixed_output_len": "ignore_eos" in extras,
             "output_tokens_counted_by": m["output_tokens_source"], "tokenizer": tok.path if tok else None,
             "input_len_exact": (not cfg.dataset and not cfg.trace and not cfg.shared_prefixes and cfg.turns == 1
                                 and all(p.input_len == cfg.input_len for p in plan.items)),
             **plan.notes}
    return RunOutcome(results, m, extra, server, start)
