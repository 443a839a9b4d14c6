"""The seed paper's engine comparison on this machine: the same loads against vLLM and
`transformers serve`, same model (tiny-llama, random weights), same server threads, one
engine at a time; request throughput, output tokens/s, TTFT and TPOT medians side by side
and the sentence that says which is ahead where.

    python benchmarks/bench_serve_engines.py [--rates 2,8,16,inf] [--num-prompts 32]

Needs the vLLM environment (`make vllm`). Target (issue 23): vLLM ahead from 8 requests/s.
"""
from __future__ import annotations

import argparse

import llmdissect.metric_names as mn
from llmdissect.specs.hardware import usable_cores
from llmdissect.workloads.serve.arrivals import parse_rates
from llmdissect.workloads.serve.local_server import ENGINE_NAMES, start_server
from llmdissect.workloads.serve.record import serve_record
from llmdissect.workloads.serve.serve_config import ServeConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--rates", default="2,8,16,inf")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    a = ap.parse_args()
    threads = max(1, usable_cores() - 1)
    rates = parse_rates(a.rates)
    rows: dict[str, dict[float, dict]] = {}
    for engine in ("vllm", "transformers"):
        print(f"starting {ENGINE_NAMES[engine]} ({threads} thread(s))...", flush=True)
        with start_server(a.model, threads=threads, engine=engine) as server:
            for rate in rates:
                cfg = ServeConfig(base_url=server.base_url, num_prompts=a.num_prompts, input_len=a.input_len,
                                  output_len=a.output_len, request_rate=rate, seed=0)
                record, _ = serve_record(cfg)
                m = record.metrics
                if record.status != "ok":
                    raise SystemExit(f"{engine} rate {rate:g}: {record.status}: {record.error}")
                rows.setdefault(engine, {})[rate] = m
                print(f"  {engine} rate {rate:g}/s: {m[mn.REQUEST_THROUGHPUT_PER_S]:.2f} req/s, "
                      f"ttft p50 {m[mn.TTFT_S]['median'] * 1e3:.0f} ms, tpot p50 {m[mn.TPOT_S]['median'] * 1e3:.1f} ms",
                      flush=True)
    print(f"\n{a.model}, {a.num_prompts} requests of {a.input_len} in / {a.output_len} out tokens, "
          f"{threads} server thread(s), medians")
    print(f"{'rate/s':>7s} {'engine':>13s} {'req/s':>7s} {'out tok/s':>10s} {'TTFT ms':>8s} {'TPOT ms':>8s}")
    ahead = []
    for rate in rates:
        for engine in ("vllm", "transformers"):
            m = rows[engine][rate]
            print(f"{rate:7g} {engine:>13s} {m[mn.REQUEST_THROUGHPUT_PER_S]:7.2f} {m[mn.OUTPUT_TOKENS_PER_S]:10.1f} "
                  f"{m[mn.TTFT_S]['median'] * 1e3:8.1f} {m[mn.TPOT_S]['median'] * 1e3:8.2f}")
        v, t = rows["vllm"][rate], rows["transformers"][rate]
        ratio = v[mn.OUTPUT_TOKENS_PER_S] / t[mn.OUTPUT_TOKENS_PER_S]
        ahead.append(f"{rate:g}/s: vLLM {ratio:.2f}x the output tokens/s, TTFT "
                     f"{v[mn.TTFT_S]['median'] / t[mn.TTFT_S]['median']:.2f}x")
    print("\n" + "; ".join(ahead))


if __name__ == "__main__":
    main()
