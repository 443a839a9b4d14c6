"""Serving metrics, exactly as docs/metrics.md "Inference" defines them.

Per request (streamed): ttft = first token chunk - send; e2e = last token chunk - send;
tpot = (e2e - ttft) / (output_tokens - 1); itl = gaps between successive token-carrying
chunks, a chunk of k tokens giving k samples of gap / k, so a request's mean ITL is its TPOT.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.measure.stats import Stats


@dataclass
class RequestResult:
    """What the client saw of one request. Times are seconds from the moment it was sent."""

    index: int
    ok: bool = False
    error: str | None = None
    send_offset_s: float = 0.0
    """When it was sent, from the start of the run."""
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    """Arrival of each chunk that carried output text."""
    chunk_texts: list[str] = field(default_factory=list)
    text: str = ""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None
    """usage | tokenizer | chunks."""
    requested_output_len: int | None = None
    input_len: int | None = None
    cached_tokens: int | None = None
    """usage.prompt_tokens_details.cached_tokens, where the server reports it."""
    session: int | None = None
    """Multi-turn runs: the session and the turn (from 0) this request was."""
    turn: int | None = None
    prefix_id: int | None = None
    """Shared-prefix loads: which shared prefix the prompt started with."""
    sent_prompt: Any = None
    """The prompt or messages sent (kept in memory for checks, never stored)."""

    @property
    def tpot_s(self) -> float | None:
        """(e2e - ttft) / (output_tokens - 1); None for one-token or unstreamed requests."""
        if self.ttft_s is None or self.e2e_s is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def chunk_token_counts(n_chunks: int, n_tokens: int, weights: Sequence[float] | None = None) -> list[int]:
    """Tokens carried by each of `n_chunks` chunks when the server reported `n_tokens` in all.

    The first chunk carries the first token. Each later chunk carries at least one token, and
    the surplus (n_tokens - n_chunks) is shared in proportion to `weights` (default: equally)
    by largest remainder. With fewer tokens than chunks (a token split over chunks) the last
    n_tokens - 1 chunks carry one each and the earlier ones none (their gaps join the next).
    """
    if n_chunks <= 0:
        return []
    if n_tokens == n_chunks:
        return [1] * n_chunks
    rest = max(n_tokens - 1, 0)
    later = n_chunks - 1
    if later == 0:
        return [1 + rest]
    if rest < later:
        return [1] + [0] * (later - rest) + [1] * rest
    w = [float(x) for x in weights[1:]] if weights is not None else [1.0] * later
    if sum(w) <= 0:
        w = [1.0] * later
    surplus, total = rest - later, sum(w)
    exact = [surplus * x / total for x in w]
    extra = [int(x) for x in exact]
    order = sorted(range(later), key=lambda i: exact[i] - extra[i], reverse=True)
    for i in order[:surplus - sum(extra)]:
        extra[i] += 1
    return [1] + [1 + e for e in extra]


def itl_samples(chunk_times_s: Sequence[float], tokens_per_chunk: Sequence[int]) -> list[float]:
    """Inter-token latencies: a chunk carrying k tokens after a gap g gives k samples of g / k.

    A chunk carrying no token passes its gap on to the next chunk that carries one. The sum of
    the samples is last - first chunk time, so their mean is the request's TPOT.
    """
    out: list[float] = []
    prev = chunk_times_s[0] if chunk_times_s else 0.0
    for t, k in zip(chunk_times_s[1:], tokens_per_chunk[1:]):
        if k <= 0:
            continue
        out.extend([(t - prev) / k] * k)
        prev = t
    return out


def request_itls(r: RequestResult) -> list[float]:
    if not r.ok or len(r.chunk_times_s) < 2 or not r.output_tokens:
        return []
    weights = None
    if r.output_tokens != len(r.chunk_times_s) and r.chunk_texts:
        weights = [max(len(t), 1) for t in r.chunk_texts]  # bytes of text as a proxy for tokens
    return itl_samples(r.chunk_times_s, chunk_token_counts(len(r.chunk_times_s), r.output_tokens, weights))


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft=0.5,tpot_p99=0.05` or a preset's name -> limits in seconds (workloads/serve/slo.py)."""
    from llmdissect.workloads.serve.slo import parse_slo as parse

    return parse(text)


def meets_slo(r: RequestResult, slo: dict[str, float]) -> bool:
    """DistServe (arXiv 2401.09670): a completed request counts toward goodput only if it met
    every SLO given. A metric the request has no value for (tpot of a 1-token answer) is met."""
    if not r.ok:
        return False
    from llmdissect.workloads.serve.slo import split_key

    values = {mn.TTFT_S: r.ttft_s, mn.TPOT_S: r.tpot_s, mn.E2E_LATENCY_S: r.e2e_s}
    for target, limit in slo.items():
        key = split_key(target)[0]  # a percentile target is a per-request limit for goodput
        if key == mn.ITL_S:
            if any(x > limit for x in request_itls(r)):
                return False
            continue
        v = values.get(key)
        if v is not None and v > limit:
            return False
    return True


def _stats(values: list[float]) -> dict[str, Any] | None:
    return Stats.of(values).to_dict() if values else None


def prefix_cache(done: Sequence[RequestResult]) -> dict[str, Any]:
    """Prefix-cache hit rate = cached prompt tokens / prompt tokens, over the completed requests
    whose `usage` reported cached tokens (OpenAI's prompt_tokens_details.cached_tokens)."""
    told = [r for r in done if r.cached_tokens is not None and r.prompt_tokens]
    if not told:
        return {mn.PREFIX_CACHE_HIT_RATE: None, "prefix_cache_reported": False}
    hit = sum(r.cached_tokens or 0 for r in told) / sum(r.prompt_tokens or 0 for r in told)
    return {mn.PREFIX_CACHE_HIT_RATE: hit, "prefix_cache_reported": True, "prefix_cache_requests": len(told)}


def summarize(results: Sequence[RequestResult], duration_s: float, slo: dict[str, float]) -> dict[str, Any]:
    """The metrics of a run from its requests (docs/metrics.md, "Inference")."""
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    out_tokens = sum(r.output_tokens or 0 for r in done)
    in_tokens = sum(r.prompt_tokens or r.input_len or 0 for r in done)
    itl: list[float] = []
    for r in done:
        itl.extend(request_itls(r))
    per_s = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: None)
    sources = sorted({r.output_tokens_source for r in done if r.output_tokens_source})
    mismatched = [r for r in done if r.requested_output_len and r.output_tokens != r.requested_output_len]
    errors: list[str] = []
    for r in failed:
        if r.error and r.error not in errors and len(errors) < 5:
            errors.append(r.error)
    m: dict[str, Any] = {
        "requests": len(results), "completed": len(done), "failed": len(failed), "errors": errors,
        mn.DURATION_S: duration_s,
        mn.TTFT_S: _stats([r.ttft_s for r in done if r.ttft_s is not None]),
        mn.TPOT_S: _stats([t for r in done if (t := r.tpot_s) is not None]),
        mn.ITL_S: _stats(itl),
        mn.E2E_LATENCY_S: _stats([r.e2e_s for r in done if r.e2e_s is not None]),
        # completed / duration, and the token throughputs likewise
        mn.REQUEST_THROUGHPUT_PER_S: per_s(len(done)),
        mn.OUTPUT_TOKENS_PER_S: per_s(out_tokens),
        mn.TOTAL_TOKENS_PER_S: per_s(out_tokens + in_tokens),
        "input_tokens": in_tokens, "output_tokens": out_tokens,
        "output_tokens_source": "+".join(sources) or None,
        "output_len_mismatched": len(mismatched),
        "output_lens": [r.output_tokens for r in done],
    }
    m.update(prefix_cache(done))
    if slo:
        m["slo"] = slo
        good = sum(1 for r in done if meets_slo(r, slo))
        m[mn.GOODPUT_PER_S] = per_s(good)  # completed requests meeting every SLO / duration
        m["slo_attainment"] = good / len(results) if results else None
    return m
