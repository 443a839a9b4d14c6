"""Quick-suite step: a small offline-inference grid of tiny-llama (issue #6).

fp32 at (batch 1, prompt 32), (batch 1, prompt 128) and (batch 4, prompt 128), plus one
quantized variant (int8 weight-only, batch 1, prompt 128); 16 output tokens each, one
warm-up and TIMED_CALLS timed calls. Each point runs in its own child process like `bench infer`,
forked from the suite's warm process (a fresh import of transformers would cost 3-4 s of
each point's ~5 s on 2 quiet cores).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

if TYPE_CHECKING:
    from llmdissect.workloads.infer_config import InferPoint

MODEL = "tiny-llama"
FP32_POINTS = [(1, 32), (1, 128), (4, 128)]
"""(batch, input_len) of the unquantized points: two batch sizes, two prompt lengths."""
OUTPUT_LEN = 16
QUANT_POINT = {"quant": "int8-weight", "batch": 1, "input_len": 128}
TIMED_CALLS = 5
"""Timed calls a point (0.1-0.3 s each here). A point's metrics are the median over its calls:
with two, the median is their mean and one call in a slow stretch of this shared machine moves
it by half the slowdown (TPOT measured 14.2 ms against 6.7-8.2 in other runs of the same code);
with five, two slow calls leave it where it was."""
TIMEOUT_S = 300.0


def quick_points() -> list[InferPoint]:
    from llmdissect.workloads.infer_launch import expand_grid

    common = dict(model=MODEL, output_len=[OUTPUT_LEN], dtype="fp32", attn="sdpa", cache=["dynamic"],
                  compile=False, warmup=1, repeats=TIMED_CALLS)
    points = [p for b, i in FP32_POINTS for p in expand_grid(batch=[b], input_len=[i], quant=["none"], **common)]
    points += expand_grid(batch=[QUANT_POINT["batch"]], input_len=[QUANT_POINT["input_len"]],
                          quant=[QUANT_POINT["quant"]], **common)
    return points


def _infer(ctx: QuickContext) -> None:
    from llmdissect.errors import UserError
    from llmdissect.workloads.infer_launch import run_point

    failed = []
    for point in quick_points():
        record, _ = run_point(point, TIMEOUT_S)
        ctx.save(record)
        label = f"{point.quant} b={point.batch} in={point.input_len} out={point.output_len}"
        if record.status == "ok":
            m = record.metrics
            ctx.log(f"infer {label}: ttft {m[mn.TTFT_S]['median'] * 1e3:.1f} ms, "
                    f"tpot {m[mn.TPOT_S]['median'] * 1e3:.2f} ms, "
                    f"decode {m[mn.DECODE_TOKENS_PER_S]['median']:.1f} tok/s, "
                    f"weights {m['weights_bytes'] / 2**20:.1f} MiB")
        elif record.status != "skipped":
            failed.append(f"{label}: {record.status} ({record.error})")
    if failed:
        raise UserError(f"{len(failed)} inference point(s) did not finish: {'; '.join(failed)}")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("infer", "offline inference grid of tiny-llama (+ int8 weight-only)", _infer)]
