"""Quick-suite step: a mixture of experts measured on this machine, so `validate --suite
quick` scores the MoE terms of the estimate (routed-expert FLOPs from the active parameters,
weights from all of them, the experts a decode step reaches) next to the dense points.

tiny-moe (Qwen3-MoE's layout: 8 experts, top-2): its routed experts' grouped GEMMs timed
(`bench ops`, forward; their efficiency by tokens per expert stored in the calibration
profile), one pre-training point on one process and one decode point, all small (a few
seconds each on 2 quiet cores).
"""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

MODEL = "tiny-moe"
TRAIN = dict(model=MODEL, seq=128, steps=3, warmup=1, device="cpu", micro_batch=2)
INFER = dict(batch=1, input_len=32, output_len=16)
TIMEOUT_S = 300.0


def _experts_efficiency(ctx: QuickContext) -> None:
    """`bench ops` of tiny-moe's layer, forward: its grouped expert GEMMs' efficiency by the
    tokens each expert gets goes into the calibration profile (the rest of the profile stays
    the ops step's tiny-llama calibration)."""
    from llmdissect.calibration_profile import update_profile
    from llmdissect.micro.ops_config import OpsConfig
    from llmdissect.micro.ops_launch import run_ops

    cfg = OpsConfig(model=MODEL, tokens=TRAIN["micro_batch"] * TRAIN["seq"], passes="fwd", min_time_s=0.01,
                    seqs=[64], quant=False, device="cpu")
    record, _ = run_ops(cfg, progress=False, timeout_s=120, store_profile=False)
    ctx.save(record)
    if record.status != "ok":
        raise RuntimeError(f"ops {MODEL} ended {record.status}: {record.error}")
    points = record.metrics["efficiency"].get("experts_by_rows") or []
    if points:
        update_profile({"cpu": {"experts_efficiency_by_rows": points}})
    ctx.log(f"ops {MODEL}: routed experts " + ", ".join(f"{e:.0%} at {r:g} tokens each" for r, e in points)
            + " of the peak; stored in the calibration profile")


def _moe(ctx: QuickContext) -> None:
    from llmdissect.errors import UserError
    from llmdissect.suites.quick_infer import TIMED_CALLS
    from llmdissect.suites.quick_train import run_and_log
    from llmdissect.workloads.infer_launch import expand_grid, run_point

    _experts_efficiency(ctx)
    run_and_log(ctx, mn.PRETRAIN, TRAIN)
    (point,) = expand_grid(model=MODEL, batch=[INFER["batch"]], input_len=[INFER["input_len"]],
                           output_len=[INFER["output_len"]], quant=["none"], dtype="fp32", attn="sdpa",
                           cache=["dynamic"], compile=False, warmup=1, repeats=TIMED_CALLS)
    record, _ = run_point(point, TIMEOUT_S)
    ctx.save(record)
    if record.status != "ok":
        raise UserError(f"infer {MODEL} ended {record.status}: {record.error}")
    m = record.metrics
    ctx.log(f"infer {MODEL} b=1 in=32 out=16: ttft {m[mn.TTFT_S]['median'] * 1e3:.1f} ms, "
            f"tpot {m[mn.TPOT_S]['median'] * 1e3:.2f} ms, decode {m[mn.DECODE_TOKENS_PER_S]['median']:.1f} tok/s")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("moe", f"a mixture of experts ({MODEL}): pre-training and decode", _moe)]
