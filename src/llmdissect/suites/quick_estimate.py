"""Quick-suite step of the analytical model: a few estimates stored beside the measurements,
so `validate` and reports can put predicted next to measured."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

ESTIMATES = [
    (mn.PRETRAIN, {"model": "llama2-70b", "hardware": "8xa800", "zero": 3, "offload": "optimizer",
                   "recompute": "full", "seq": 4096, "micro_batch": 1, "grad_accum": 8}),
    (mn.PRETRAIN, {"model": "llama2-7b", "hardware": "8xa800", "zero": 2, "recompute": "none", "seq": 2048,
                   "micro_batch": 2}),
    (mn.FINETUNE, {"model": "llama2-7b", "hardware": "rtx4090", "lora_rank": 16, "quant": "nf4", "seq": 1024}),
    (mn.INFER, {"model": "llama2-7b", "hardware": "a800", "batch": 8, "input_len": 512, "output_len": 128}),
    (mn.PRETRAIN, {"model": "tiny-llama", "hardware": "cpu", "seq": 256, "micro_batch": 1}),
    (mn.INFER, {"model": "tiny-llama", "hardware": "cpu", "batch": 1, "input_len": 128, "output_len": 32}),
]


def _estimates(ctx: QuickContext) -> None:
    from llmdissect.perfmodel.request import build_estimate, estimate_env

    env = estimate_env(None)
    for kind, opts in ESTIMATES:
        opts = {"attn": "sdpa", "quant": "none", "tp": 1, **opts}
        est = build_estimate(kind, opts)
        ctx.save(est.to_record(env))
        m = est.metrics
        rate = f", {m[mn.TOKENS_PER_S]:.4g} tokens/s, MFU {m[mn.MFU]:.1%}" if m.get(mn.TOKENS_PER_S) else ""
        ctx.log(f"estimate {kind} {opts['model']} on {opts['hardware']}: {est.verdict()}{rate}")


def _fixed_costs(ctx: QuickContext) -> None:
    from llmdissect.console import human_seconds
    from llmdissect.micro.reprobe import COLD, remeasure_fixed_costs

    probe, kept, stored = remeasure_fixed_costs()
    before = stored.get("op_fixed_s")
    was = human_seconds(before) if isinstance(before, (int, float)) else "none"
    if not kept:
        outcome = "peak's set stays"
    elif "op_fixed_s" in kept:
        peaks_cold = kept.get(COLD) != probe.get(COLD)
        outcome = "this quieter set is stored" + (", with peak's lower cold cost" if peaks_cold else "")
    else:
        outcome = f"peak's set stays, with this probe's lower cold cost ({human_seconds(kept[COLD])})"
    ctx.log(f"fixed costs again: {human_seconds(probe['op_fixed_s'])} an operator against peak's {was}; {outcome}")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("fixed-costs", "the fixed-cost probe again (the quieter of it and peak's is kept)",
                      _fixed_costs),
            QuickStep("estimate", "analytical estimates (no run): 70B ZeRO-3 on 8xA800, 7B QLoRA, tiny-llama on CPU",
                      _estimates)]
