"""Quick-suite step of the serving benchmark: tiny-llama on a local `transformers serve`,
a short request-rate sweep (one record per rate), then the server is stopped."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

MODEL = "tiny-llama"
RATES = (2.0, 8.0, float("inf"))
NUM_PROMPTS, INPUT_LEN, OUTPUT_LEN = 12, 64, 24
SLO = {mn.TTFT_S: 0.5, mn.TPOT_S: 0.05}


def _serve_sweep(ctx: QuickContext) -> None:
    from llmdissect.errors import UserError
    from llmdissect.specs.hardware import usable_cores
    from llmdissect.workloads.serve.local_server import BLOCK_TOKENS, CACHE_TOKENS, MAX_BATCH_TOKENS, start_server
    from llmdissect.workloads.serve.record import serve_record
    from llmdissect.workloads.serve.serve_config import ServeConfig

    threads = max(1, usable_cores() - 1)
    server = start_server(MODEL, threads=threads)
    # what served it, for validate to simulate the same load on the same engine
    served = {"model": MODEL, "hardware": "cpu", "engine": "transformers", "threads": threads, "dtype": "fp32",
              "block_size": BLOCK_TOKENS, "num_blocks": CACHE_TOKENS // BLOCK_TOKENS,
              "max_batched_tokens": MAX_BATCH_TOKENS}
    failed = []
    try:
        for rate in RATES:
            cfg = ServeConfig(base_url=server.base_url, num_prompts=NUM_PROMPTS, input_len=INPUT_LEN,
                              output_len=OUTPUT_LEN, request_rate=rate, slo=dict(SLO), seed=0)
            record, _ = serve_record(cfg)
            record.config["server"] = f"transformers serve ({MODEL}, {threads} thread(s), continuous batching)"
            record.config["served"] = dict(served)
            ctx.save(record)
            m = record.metrics
            if record.status != "ok":
                failed.append(f"rate {rate:g}: {record.error}")
                continue
            ctx.log(f"serve {MODEL} rate {rate:g}/s: {m[mn.REQUEST_THROUGHPUT_PER_S]:.2f} req/s, "
                    f"{m[mn.OUTPUT_TOKENS_PER_S]:.0f} out tok/s, ttft p50 {m[mn.TTFT_S]['median'] * 1e3:.0f} ms, "
                    f"tpot p50 {m[mn.TPOT_S]['median'] * 1e3:.1f} ms, goodput {m[mn.GOODPUT_PER_S]:.2f}/s, "
                    f"client {m['client_cpu_s_per_request'] * 1e3:.1f} ms CPU/request")
    finally:
        server.stop()
    if failed:
        raise UserError("; ".join(failed))


def quick_steps() -> list[QuickStep]:
    return [QuickStep("serve", f"{MODEL} on a local transformers serve: a request-rate sweep", _serve_sweep)]
