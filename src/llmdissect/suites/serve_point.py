"""A suite's `serve` point, run in a child process: start the local server (`engine`:
transformers serve or vLLM) for the model on 127.0.0.1 (unless `base_url` names a running
server), send the load, stop the server.

Its options are `ServePoint`'s fields: the local server's (model, threads) and, with
shorter defaults, the load options of `bench serve` (workloads.serve.serve_config.ServeConfig).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from llmdissect.workloads.serve.serve_config import Endpoint, ServeConfig


class ServePoint(BaseModel):
    """One `serve` entry of a suite: a local server (or base_url) and the load sent to it."""

    model_config = ConfigDict(extra="forbid")

    model: str = "tiny-llama"
    """Model spec the local server serves (random weights); the requests ask for the server's model."""
    engine: Literal["transformers", "vllm"] = "transformers"
    """The local server: transformers serve, or vLLM from its own environment (make vllm)."""
    base_url: Optional[str] = None
    """A running server to measure instead of a local one."""
    num_prompts: int = Field(20, ge=1)
    """Requests to send."""
    input_len: int = Field(64, ge=1)
    """Tokens per synthetic prompt."""
    output_len: int = Field(32, ge=1)
    """max_tokens per request."""
    request_rate: float | str = "inf"
    """Requests per second (Poisson), or "inf" (all at once)."""
    max_concurrency: Optional[int] = Field(None, ge=1)
    """At most this many requests in flight; None: no limit."""
    threads: Optional[int] = Field(None, ge=1)
    """Threads of the local server; None: usable cores - 1."""
    seed: int = 0
    """Seed of the server's random weights, the prompts and the arrivals."""
    slo: Optional[str] = None
    """SLOs for goodput, seconds: "ttft=0.5,tpot=0.05"."""
    endpoint: Endpoint = "completions"
    """completions | chat."""


SERVER_ONLY = ("model", "engine", "threads")
"""ServePoint fields that configure the local server, not the load (ServeConfig)."""


def serve_config(point: ServePoint, base_url: str) -> ServeConfig:
    """The load generator's config of a point, sent to `base_url`."""
    from llmdissect.workloads.serve.metrics import parse_slo

    rate = math.inf if str(point.request_rate) == "inf" else float(point.request_rate)
    return ServeConfig(base_url=base_url, endpoint=point.endpoint, num_prompts=point.num_prompts,
                       input_len=point.input_len, output_len=point.output_len, request_rate=rate,
                       max_concurrency=point.max_concurrency, seed=point.seed, slo=parse_slo(point.slo))


def run(config: dict[str, Any]) -> dict[str, Any]:
    from llmdissect.config import parse_config
    from llmdissect.specs.hardware import usable_cores
    from llmdissect.workloads.serve.record import serve_record

    point = parse_config(ServePoint, **config)
    threads = point.threads or max(1, usable_cores() - 1)
    server = None
    base_url = point.base_url
    if not base_url:
        from llmdissect.workloads.serve.local_server import start_server

        server = start_server(point.model, threads=threads, seed=point.seed, engine=point.engine)
        base_url = server.base_url
    try:
        record, _ = serve_record(serve_config(point, base_url))
    finally:
        if server is not None:
            server.stop()
    if server is not None:
        from llmdissect.workloads.serve.local_server import ENGINE_NAMES

        record.config["server"] = f"{ENGINE_NAMES[point.engine]} ({point.model}, {threads} thread(s))"
        record.config["engine"] = point.engine
    return {"record": record.to_dict()}
