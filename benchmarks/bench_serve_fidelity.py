"""How well the serving simulation predicts a real server on this machine (issue 18's check).

Starts `transformers serve` (or vLLM with `--engine vllm` where `make vllm` made its
environment) on tiny-llama as the quick suite does, sends the same load at each request rate
of a sweep up to saturation, and simulates each measured run as `validate` does (its own send
times, the scheduler settings the server ran with, this machine's calibration: run `make run`
or `llmdissect peak` first). Prints measured against simulated TTFT p50, TPOT p50 and request
throughput per rate, and each metric's median |error| over the rates.

    python benchmarks/bench_serve_fidelity.py [--rates 1,2,4,8,16,inf] [--num-prompts 24]

Target (issue 18): each median |error| within 20 %.
"""
from __future__ import annotations

import argparse
import statistics

import llmdissect.metric_names as mn
from llmdissect.analysis.serve_estimate import estimate_measured_serve
from llmdissect.specs.hardware import usable_cores
from llmdissect.suites.quick_serve import SLO, served_settings
from llmdissect.workloads.serve.arrivals import parse_rates
from llmdissect.workloads.serve.local_server import start_server
from llmdissect.workloads.serve.record import serve_record
from llmdissect.workloads.serve.serve_config import ServeConfig

METRICS = (("TTFT p50", lambda m: m[mn.TTFT_S]["median"] * 1e3, "ms"),
           ("TPOT p50", lambda m: m[mn.TPOT_S]["median"] * 1e3, "ms"),
           ("requests/s", lambda m: m[mn.REQUEST_THROUGHPUT_PER_S], ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--engine", default="transformers", choices=("transformers", "vllm"))
    ap.add_argument("--rates", default="1,2,4,8,16,inf")
    ap.add_argument("--num-prompts", type=int, default=24)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=24)
    a = ap.parse_args()
    threads = max(1, usable_cores() - 1)  # one core left to the client, as the quick suite does
    server = start_server(a.model, threads=threads, engine=a.engine)
    rows = []
    try:
        for rate in parse_rates(a.rates):
            cfg = ServeConfig(base_url=server.base_url, num_prompts=a.num_prompts, input_len=a.input_len,
                              output_len=a.output_len, request_rate=rate, slo=dict(SLO), seed=0)
            record, _ = serve_record(cfg)
            if record.status != "ok":
                raise SystemExit(f"rate {rate:g}: {record.error}")
            record.config["served"] = served_settings(a.engine, threads, server.settings,
                                                      (record.env.get("server") or {}).get("cache_config") or {})
            record.config["served"]["model"] = a.model
            sim = estimate_measured_serve(record.config, record.metrics)
            rows.append((rate, record.metrics, sim.metrics))
            print(f"rate {rate:g}/s done", flush=True)
    finally:
        server.stop()
    print(f"\n{a.model} on {a.engine} serve, {threads} thread(s), {a.num_prompts} requests of "
          f"{a.input_len} + {a.output_len} tokens; measured vs simulated")
    print(f"{'rate':>8} | " + " | ".join(f"{name:>22}" for name, _, _ in METRICS))
    errors: dict[str, list[float]] = {name: [] for name, _, _ in METRICS}
    for rate, measured, simulated in rows:
        cells = []
        for name, get, unit in METRICS:
            m, s = get(measured), get(simulated)
            errors[name].append(s / m - 1)
            cells.append(f"{m:7.2f} vs {s:7.2f} {unit:>2} {s / m - 1:+4.0%}")
        print(f"{'all' if rate == float('inf') else f'{rate:g}/s':>8} | " + " | ".join(cells))
    print("median |error|: " + ", ".join(f"{name} {statistics.median(abs(e) for e in errs):.0%}"
                                         for name, errs in errors.items()))


if __name__ == "__main__":
    main()
