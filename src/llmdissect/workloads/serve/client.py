"""The HTTP side of the load generator: server-sent-event parsing, one request, and a probe.

Servers differ and the client copes: a stream ends at `data: [DONE]` or when the server
closes it after a `finish_reason` (transformers serve sends no [DONE]); `usage` is read from
whichever event carries it; fields a server rejects (HTTP 400/422) are found by one probe
and then never sent.
"""
from __future__ import annotations

import json
import time
from typing import Any

from llmdissect.errors import UserError
from llmdissect.workloads.serve.metrics import RequestResult

# Fields that fix the output length, per server kind ("auto" probes for them).
SERVER_KINDS: dict[str, dict[str, Any]] = {
    "auto": {"ignore_eos": True},
    "vllm": {"ignore_eos": True},
    "sglang": {"ignore_eos": True},
    "llamacpp": {"ignore_eos": True},
    "transformers": {},
    "openai": {},
}


class SSEParser:
    """Incremental server-sent-events parser: feed bytes, get the `data` of complete events.

    Lines end in \\n, \\r\\n or \\r; an empty line ends an event; `:` lines are comments;
    several `data:` lines of one event are joined with \\n (the SSE specification)."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        buf = self._buf + chunk
        hold = b""
        if buf.endswith(b"\r"):  # may be the first half of \r\n
            buf, hold = buf[:-1], b"\r"
        lines = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._buf = lines.pop() + hold
        return self._lines(lines)

    def close(self) -> list[str]:
        """End of stream: what was pending counts as a last event (servers that just close)."""
        rest, self._buf = self._buf.rstrip(b"\r"), b""
        events = self._lines([rest] if rest else [])
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _lines(self, lines: list[bytes]) -> list[str]:
        events = []
        for line in lines:
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line[:1] != b":":
                name, _, value = line.partition(b":")
                if name == b"data":
                    self._data.append((value[1:] if value[:1] == b" " else value).decode("utf-8", "replace"))
        return events


def choice_text(obj: dict[str, Any]) -> tuple[str, str | None]:
    """(text, finish_reason) of the first choice of a completion or chat (chunk) object."""
    choices = obj.get("choices") or []
    if not choices:
        return "", None
    c = choices[0]
    text = c.get("text")
    if text is None:
        part = c.get("delta") or c.get("message") or {}
        text = part.get("content")
    return text or "", c.get("finish_reason")


def _count(r: RequestResult, usage: dict | None, tok: Any) -> None:
    """Output tokens from `usage` when the server reports it, else the tokenizer, else chunks."""
    if usage and usage.get("completion_tokens") is not None:
        r.output_tokens, r.output_tokens_source = int(usage["completion_tokens"]), "usage"
        if usage.get("prompt_tokens") is not None:
            r.prompt_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            r.cached_tokens = int(details["cached_tokens"])
    elif tok is not None:
        r.output_tokens, r.output_tokens_source = tok.count(r.text), "tokenizer"
    else:
        r.output_tokens, r.output_tokens_source = len(r.chunk_times_s), "chunks"


async def send(session: Any, url: str, body: bytes, headers: dict[str, str], stream: bool,
               r: RequestResult, tok: Any = None) -> RequestResult:
    """Send one request and fill `r` (times from the moment the request is sent)."""
    import aiohttp

    perf = time.perf_counter
    t0 = perf()
    usage = finish = None
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            t_head = perf() - t0
            if resp.status != 200:
                r.error = f"HTTP {resp.status}: {(await resp.text())[:200].strip()}"
                return r
            if not stream:
                obj = await resp.json(content_type=None)
                r.e2e_s = perf() - t0
                r.text, finish = choice_text(obj)
                usage = obj.get("usage")
            else:
                parser, done, texts, times = SSEParser(), False, r.chunk_texts, r.chunk_times_s
                # Body bytes that came in the packet of the headers (servers that send headers with
                # the first chunk) arrived when the headers did, not when we got round to them.
                early = resp.content.total_bytes > 0
                async for chunk in resp.content.iter_any():
                    now = t_head if early else perf() - t0
                    early = False
                    for data in parser.feed(chunk):
                        if data.strip() == "[DONE]":
                            done = True
                            break
                        obj = json.loads(data)
                        if obj.get("error"):
                            raise ValueError(f"server error: {str(obj['error'])[:200]}")
                        text, fin = choice_text(obj)
                        if text:
                            times.append(now)
                            texts.append(text)
                        usage = obj.get("usage") or usage
                        finish = fin or finish
                    if done:
                        break
                if not done:
                    for data in parser.close():
                        if data.strip() != "[DONE]":
                            obj = json.loads(data)
                            usage, finish = obj.get("usage") or usage, choice_text(obj)[1] or finish
                if not done and finish is None:
                    r.error = "stream closed before the end of the answer (no finish_reason, no [DONE])"
                    return r
                if not times:
                    r.error = "stream carried no output text"
                    return r
                r.ttft_s, r.e2e_s = times[0], times[-1]
                r.text = "".join(texts)
        _count(r, usage, tok)
        r.ok = True
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KeyError, AttributeError) as e:
        r.error = f"{type(e).__name__}: {e}"[:300] if str(e) else type(e).__name__
    return r


async def probe(session: Any, base_url: str, endpoint: str, model: str | None, headers: dict[str, str],
                extras: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """One small request before the run: checks the URL answers like an OpenAI server, picks
    the model when none is named, and keeps only the `extras` the server accepts.

    Returns (model, accepted extras, server info). Raises UserError for an unreachable URL
    or a non-OpenAI answer."""
    import aiohttp

    info: dict[str, Any] = {}
    try:
        async with session.get(base_url + "/v1/models", headers=headers) as resp:
            info["server_header"] = resp.headers.get("server")
            if resp.status == 200:
                try:
                    ids = [m.get("id") for m in (await resp.json(content_type=None)).get("data", [])]
                except (ValueError, AttributeError, TypeError):
                    ids = []
                info["models"] = ids
                model = model or (ids[0] if ids else None)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise UserError(f"cannot reach {base_url}: {type(e).__name__}: {e}") from None
    if not model:
        raise UserError(f"{base_url} lists no model; name one with --model")
    for attempt in ([extras, {}] if extras else [{}]):
        payload = {"model": model, "max_tokens": 1, "stream": False, **attempt}
        payload.update({"prompt": "Hello"} if endpoint.endswith("/completions") and "chat" not in endpoint
                       else {"messages": [{"role": "user", "content": "Hello"}]})
        try:
            async with session.post(base_url + endpoint, json=payload, headers=headers) as resp:
                status, body = resp.status, await resp.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise UserError(f"cannot reach {base_url}: {type(e).__name__}: {e}") from None
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("choices"), list):
            info["rejected_fields"] = sorted(set(extras) - set(attempt))
            return model, attempt, info
        if status in (400, 422) and attempt:
            continue
        break
    raise UserError(f"{base_url}{endpoint} does not answer like an OpenAI-compatible server: "
                    f"HTTP {status}: {' '.join(body.split())[:150]}")
