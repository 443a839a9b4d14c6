"""What the server says about itself during a `bench serve` run: who it is (vLLM's /version,
the labels of its `vllm:cache_config_info` gauge) and a time series of its Prometheus
/metrics (running and waiting requests, KV-cache use, prefix-cache queries and hits,
preemptions, prompt and generated tokens, scheduler iterations), scraped every
SCRAPE_INTERVAL_S from the same event loop as the requests.

Prometheus' text format (prometheus.io/docs/instrumenting/exposition_formats): a sample is
`name{label="v",...} value [timestamp]`; lines starting with `#` are help and type. A name
with several label sets (one per model or engine) is summed here.
"""
from __future__ import annotations

import asyncio
import re
import time
from typing import Any

SCRAPE_INTERVAL_S = 0.5
WATCHED: dict[str, tuple[str, ...]] = {
    # our name: the Prometheus names that give it, vLLM's v1 engine first, older names after
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_use": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "iterations": ("vllm:iteration_tokens_total_count",),
    "iteration_tokens": ("vllm:iteration_tokens_total_sum",),
}
CACHE_LABELS = ("block_size", "num_gpu_blocks", "kv_cache_size_tokens", "kv_cache_memory_bytes",
                "enable_prefix_caching", "cache_dtype", "sliding_window")
"""What a record keeps of vLLM's cache_config_info labels (it has some forty)."""
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> dict[str, float]:
    """Every sample's value by metric name, summed over its label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def info_labels(text: str, name: str) -> dict[str, str]:
    """The labels of an info gauge (`name{k="v",...} 1`), the first label set."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return dict(_LABEL.findall(line[len(name):line.rindex("}") + 1]))
    return {}


def watched(samples: dict[str, float]) -> dict[str, float]:
    """Our names for what the server exposes (the first of each name's aliases it has)."""
    out = {}
    for ours, names in WATCHED.items():
        found = next((n for n in names if n in samples), None)
        if found is not None:
            out[ours] = samples[found]
    return out


async def identify(session: Any, base_url: str, headers: dict[str, str]) -> dict[str, Any]:
    """The server's engine, version and cache settings where it says them, and whether it has
    a Prometheus /metrics ("metrics": True) or why not ("metrics_not_available")."""
    import aiohttp

    info: dict[str, Any] = {}
    try:
        async with session.get(base_url + "/version", headers=headers) as resp:
            body = await resp.json(content_type=None) if resp.status == 200 else None
            if isinstance(body, dict) and body.get("version"):
                info["version"] = str(body["version"])
        async with session.get(base_url + "/metrics", headers=headers) as resp:
            text = await resp.text() if resp.status == 200 else ""
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
        info["metrics_not_available"] = f"/metrics did not answer: {type(e).__name__}"
        return info
    samples = parse_samples(text)
    if status != 200 or not samples:
        info["metrics_not_available"] = f"the server exposes no Prometheus /metrics (HTTP {status})"
        return info
    info["metrics"] = True
    if any(name.startswith("vllm:") for name in samples):
        info["engine"] = "vllm"
        cache = info_labels(text, "vllm:cache_config_info")
        kept = {k: cache[k] for k in CACHE_LABELS if k in cache}
        if kept:
            info["cache_config"] = kept
    return info


class Scraper:
    """Polls /metrics until stopped; `result()` is the series: seconds since `start` and, per
    watched name, its values (counters as the server reports them: totals since it started).
    A scrape before the first request (`scrape()` before `start` is set) is the baseline the
    run's counters are measured from."""

    def __init__(self, url: str, headers: dict[str, str], start: float | None = None,
                 interval_s: float = SCRAPE_INTERVAL_S):
        self.url, self.headers, self.start, self.interval_s = url, headers, start, interval_s
        self.session: Any = None  # its own connection: the requests' pool may be capped at their concurrency
        self.t: list[float] = []
        self.values: list[dict[str, float]] = []
        self.errors = 0
        self._stop = asyncio.Event()

    async def scrape(self) -> None:
        """One scrape, stamped with the seconds since `start` (0 for one taken before it)."""
        import aiohttp

        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self.session.get(self.url, headers=self.headers) as resp:
                text = await resp.text()
            self.t.append(max(0.0, time.perf_counter() - self.start) if self.start is not None else 0.0)
            self.values.append(watched(parse_samples(text)))
        except (aiohttp.ClientError, TimeoutError, OSError):
            self.errors += 1

    async def run(self) -> None:
        """Scrape every interval until stopped, then once more: the counters' last values
        include the run's last tokens."""
        try:
            while not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._stop.wait(), self.interval_s)
                except TimeoutError:
                    await self.scrape()
            await self.scrape()
        finally:
            if self.session is not None:
                await self.session.close()

    def stop(self) -> None:
        self._stop.set()

    def result(self) -> dict[str, Any]:
        names = sorted({k for v in self.values for k in v})
        series = {k: [v.get(k) for v in self.values] for k in names}
        out: dict[str, Any] = {"interval_s": self.interval_s, "t_s": self.t, "series": series,
                               "failed_scrapes": self.errors}
        for counter in ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens",
                        "generation_tokens", "iterations", "iteration_tokens"):
            values = [x for x in series.get(counter, []) if x is not None]
            if len(values) >= 2:
                out[f"{counter}_during_run"] = values[-1] - values[0]
        q, h = out.get("prefix_cache_queries_during_run"), out.get("prefix_cache_hits_during_run")
        if q:
            out["prefix_cache_hit_rate"] = h / q if h is not None else None
        if out.get("iterations_during_run"):
            out["mean_tokens_per_iteration"] = out.get("iteration_tokens_during_run", 0) / out["iterations_during_run"]
        for gauge in ("running", "waiting", "kv_cache_use"):
            values = [x for x in series.get(gauge, []) if x is not None]
            if values:
                out[f"{gauge}_max"] = max(values)
        return out
