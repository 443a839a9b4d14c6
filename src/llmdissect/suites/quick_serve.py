"""Quick-suite step of the serving benchmark: tiny-llama on a local vLLM where its environment
is installed (`make vllm`, or `make test`; its start-up adds a minute or more) or else
`transformers serve`, a short request-rate sweep (one record per rate), then the server is
stopped. Each record names the engine and the settings validate simulates it with."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

MODEL = "tiny-llama"
RATES = (2.0, 8.0, float("inf"))
NUM_PROMPTS, INPUT_LEN, OUTPUT_LEN = 12, 64, 24
SLO = {mn.TTFT_S: 0.5, mn.TPOT_S: 0.05}


def served_settings(engine: str, threads: int, settings: dict, cache: dict) -> dict:
    """What served the step's runs, for validate to simulate the same load on the same engine
    (analysis.serve_estimate): transformers serve as serve-local sizes it; vLLM with the
    scheduler settings serve-local gave it and the KV cache it reported (/metrics'
    cache_config_info: block size and blocks)."""
    from llmdissect.workloads.serve.local_server import BLOCK_TOKENS, CACHE_TOKENS, MAX_BATCH_TOKENS

    served = {"model": MODEL, "hardware": "cpu", "engine": engine, "threads": threads, "dtype": "fp32"}
    if engine == "vllm":
        served.update(max_num_seqs=settings["max_num_seqs"], max_batched_tokens=settings["max_num_batched_tokens"])
        if cache.get("block_size") and cache.get("num_gpu_blocks"):
            served.update(block_size=int(cache["block_size"]), num_blocks=int(cache["num_gpu_blocks"]))
    else:
        served.update(block_size=BLOCK_TOKENS, num_blocks=CACHE_TOKENS // BLOCK_TOKENS,
                      max_batched_tokens=MAX_BATCH_TOKENS)
    return served


def _serve_sweep(ctx: QuickContext) -> None:
    from llmdissect.errors import UserError
    from llmdissect.specs.hardware import usable_cores
    from llmdissect.workloads.serve.local_server import ENGINE_NAMES, start_server
    from llmdissect.workloads.serve.record import serve_record
    from llmdissect.workloads.serve.serve_config import ServeConfig
    from llmdissect.workloads.serve.vllm_engine import vllm_python

    threads = max(1, usable_cores() - 1)
    engine = "vllm" if vllm_python() is not None else "transformers"
    server = start_server(MODEL, threads=threads, engine=engine)
    failed = []
    try:
        for rate in RATES:
            cfg = ServeConfig(base_url=server.base_url, num_prompts=NUM_PROMPTS, input_len=INPUT_LEN,
                              output_len=OUTPUT_LEN, request_rate=rate, slo=dict(SLO), seed=0)
            record, _ = serve_record(cfg)
            record.config["served"] = served_settings(engine, threads, server.settings,
                                                      (record.env.get("server") or {}).get("cache_config") or {})
            record.config["server"] = (f"{ENGINE_NAMES[engine]} ({MODEL}, {threads} thread(s)"
                                       + (", continuous batching)" if engine == "transformers" else ")"))
            record.config["engine"] = engine
            ctx.save(record)
            m = record.metrics
            if record.status != "ok":
                failed.append(f"rate {rate:g}: {record.error}")
                continue
            ctx.log(f"serve {MODEL} ({engine}) rate {rate:g}/s: {m[mn.REQUEST_THROUGHPUT_PER_S]:.2f} req/s, "
                    f"{m[mn.OUTPUT_TOKENS_PER_S]:.0f} out tok/s, ttft p50 {m[mn.TTFT_S]['median'] * 1e3:.0f} ms, "
                    f"tpot p50 {m[mn.TPOT_S]['median'] * 1e3:.1f} ms, goodput {m[mn.GOODPUT_PER_S]:.2f}/s, "
                    f"client {m['client_cpu_s_per_request'] * 1e3:.1f} ms CPU/request")
    finally:
        server.stop()
    if failed:
        raise UserError("; ".join(failed))


def quick_steps() -> list[QuickStep]:
    return [QuickStep("serve", f"{MODEL} on a local vLLM (where `make vllm` made its environment) or transformers "
                               "serve: a request-rate sweep", _serve_sweep)]
