"""What one `bench serve` run is asked: a typed config (no aiohttp, no torch, no network).

The record stores `ServeConfig.to_config()`; the API key is never a field of it (it is
passed to the load generator on its own).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
Endpoint = Literal["completions", "chat"]
"""The keys of ENDPOINTS (tests/unit/test_config_fields.py checks they agree)."""
TraceFormat = Literal["auto", "mooncake", "azure", "burstgpt"]
"""workloads.serve.traces.FORMATS."""
ServerKind = Literal["auto", "vllm", "sglang", "llamacpp", "transformers", "openai"]
"""The keys of workloads.serve.client.SERVER_KINDS (checked by the same test)."""


class ServeConfig(BaseModel):
    """What `bench serve` runs (the stored config; the API key is never part of it)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str
    """Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is dropped)."""
    model: Optional[str] = None
    """Model name to request; None: the server's first."""
    endpoint: Endpoint = "completions"
    """completions (/v1/completions) or chat (/v1/chat/completions)."""
    stream: bool = True
    """Stream tokens (needed for TTFT and ITL)."""
    num_prompts: int = Field(100, ge=1)
    """Requests to send."""
    input_len: int = Field(128, ge=1)
    """Tokens per synthetic prompt (exact, by the tokenizer)."""
    output_len: Optional[int] = Field(None, ge=1)
    """max_tokens per request; None: 128, or the dataset reply's length."""
    dataset: Optional[str] = None
    """ShareGPT-style JSON/JSONL file (read locally); None: synthetic prompts."""
    tokenizer: Optional[str] = None
    """Local tokenizer folder; None: the model's folder if it is one."""
    request_rate: float = math.inf
    """Requests per second (Poisson; gamma with burstiness); inf sends them all at once."""
    burstiness: float = 1.0
    """Gamma shape of the gaps between requests: 1 Poisson, below 1 burstier."""
    max_concurrency: Optional[int] = Field(None, ge=1)
    """At most this many requests in flight (a closed loop); None: no limit."""
    arrivals: Optional[str] = None
    """Replay send offsets from a JSON file or a stored record instead of drawing them."""
    turns: int = Field(1, ge=1)
    """Turns per session: above 1, num_prompts sessions each send this many requests, every
    turn carrying the whole conversation so far (workloads/serve/sessions.py)."""
    think_time_s: float = Field(0.0, ge=0)
    """Seconds between an answer and the session's next turn."""
    shared_prefixes: int = Field(0, ge=0)
    """Distinct shared system prompts (0: none); see workloads/serve/shared_prefix.py."""
    prefix_len: int = Field(64, ge=1)
    """Tokens of each shared prefix."""
    prefix_fraction: float = Field(1.0, ge=0, le=1)
    """Fraction of the requests (exactly, rounded) that start with a shared prefix."""
    trace: Optional[str] = None
    """Replay a recorded trace: its arrival times and lengths (workloads/serve/traces.py)."""
    trace_format: TraceFormat = "auto"
    """auto, mooncake (JSONL), azure (CSV) or burstgpt (CSV)."""
    time_scale: float = Field(1.0, ge=0)
    """Trace gaps are multiplied by this: 1 as recorded, 0.5 twice as fast."""
    trace_block_tokens: int = Field(512, ge=1)
    """Prompt tokens per Mooncake hash id (512 in Mooncake's traces)."""
    seed: int = 0
    """Seed of the prompts and the arrivals."""
    server_kind: ServerKind = "auto"
    """Which fields fix the output length: auto (probe), vllm, sglang, llamacpp, transformers, openai."""
    slo: dict[str, float] = Field(default_factory=dict)
    """Service-level objectives for goodput, seconds ({"ttft_s": 0.5, "tpot_s": 0.05})."""
    usd_per_hour: Optional[float] = Field(None, gt=0)
    """Price of the serving hardware, USD per hour, for the cost per million tokens; None: no cost."""
    timeout_s: float = 300.0
    """Per-request time limit, seconds."""

    def to_config(self) -> dict[str, Any]:
        """The record's config: every field, with an infinite rate written "inf" (valid JSON)."""
        d = self.model_dump()
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        return d
