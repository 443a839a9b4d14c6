"""A suite's `serve` point, run in a child process: start `transformers serve` for the model on
127.0.0.1 (unless `base_url` names a running server), send the load, stop the server.

Options: model (tiny-llama), base_url, num_prompts (20), input_len (64), output_len (32),
request_rate (inf), max_concurrency, threads (server threads: cores - 1), seed, slo
("ttft=0.5,tpot=0.05"), endpoint (completions | chat).
"""
from __future__ import annotations

import math
from typing import Any


def run(config: dict[str, Any]) -> dict[str, Any]:
    from llmdissect.specs.hardware import usable_cores
    from llmdissect.workloads.serve.metrics import parse_slo
    from llmdissect.workloads.serve.record import serve_record
    from llmdissect.workloads.serve.serve_config import ServeConfig

    rate = config.get("request_rate", "inf")
    rate = math.inf if str(rate) == "inf" else float(rate)
    threads = int(config.get("threads") or max(1, usable_cores() - 1))
    server = None
    base_url = config.get("base_url")
    if not base_url:
        from llmdissect.workloads.serve.local_server import start_server

        server = start_server(config.get("model", "tiny-llama"), threads=threads, seed=int(config.get("seed", 0)))
        base_url = server.base_url
    try:
        cfg = ServeConfig(base_url=base_url, endpoint=config.get("endpoint", "completions"),
                          num_prompts=int(config.get("num_prompts", 20)), input_len=int(config.get("input_len", 64)),
                          output_len=int(config.get("output_len", 32)), request_rate=rate,
                          max_concurrency=config.get("max_concurrency"), seed=int(config.get("seed", 0)),
                          slo=parse_slo(config.get("slo")))
        record, _ = serve_record(cfg)
    finally:
        if server is not None:
            server.stop()
    if server is not None:
        record.config["server"] = f"transformers serve ({config.get('model', 'tiny-llama')}, {threads} thread(s))"
    return {"record": record.to_dict()}
