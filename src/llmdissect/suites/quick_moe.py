"""Quick-suite step: a mixture of experts measured on this machine, so `validate --suite
quick` scores the MoE terms of the estimate (routed-expert FLOPs from the active parameters,
weights from all of them, the experts a decode step reaches) next to the dense points.

tiny-moe (Qwen3-MoE's layout: 8 experts, top-2): one pre-training point on one process and
one decode point, both small (a few seconds each on 2 quiet cores).
"""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

MODEL = "tiny-moe"
TRAIN = dict(model=MODEL, seq=128, steps=3, warmup=1, device="cpu", micro_batch=2)
INFER = dict(batch=1, input_len=32, output_len=16)
TIMEOUT_S = 300.0


def _moe(ctx: QuickContext) -> None:
    from llmdissect.errors import UserError
    from llmdissect.suites.quick_train import run_and_log
    from llmdissect.workloads.infer_launch import expand_grid, run_point

    run_and_log(ctx, mn.PRETRAIN, TRAIN)
    (point,) = expand_grid(model=MODEL, batch=[INFER["batch"]], input_len=[INFER["input_len"]],
                           output_len=[INFER["output_len"]], quant=["none"], dtype="fp32", attn="sdpa",
                           cache=["dynamic"], compile=False, warmup=1, repeats=2)
    record, _ = run_point(point, TIMEOUT_S)
    ctx.save(record)
    if record.status != "ok":
        raise UserError(f"infer {MODEL} ended {record.status}: {record.error}")
    m = record.metrics
    ctx.log(f"infer {MODEL} b=1 in=32 out=16: ttft {m[mn.TTFT_S]['median'] * 1e3:.1f} ms, "
            f"tpot {m[mn.TPOT_S]['median'] * 1e3:.2f} ms, decode {m[mn.DECODE_TOKENS_PER_S]['median']:.1f} tok/s")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("moe", f"a mixture of experts ({MODEL}): pre-training and decode", _moe)]
