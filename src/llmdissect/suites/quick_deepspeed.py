"""Quick-suite step: DeepSpeed ZeRO-2 pre-training of tiny-llama on 2 processes (gloo).

Its CPU ops are compiled once into `engines.deepspeed.ops_dir()` (make does it at set-up),
so the step costs the run itself. Skipped with a line where deepspeed is not installed.
"""
from __future__ import annotations

import importlib.util

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

OPTIONS = dict(model="tiny-llama", seq=128, steps=5, warmup=1, device="cpu", micro_batch=1, nproc=2,
               engine="deepspeed", zero=2)


def _run(ctx: QuickContext) -> None:
    if importlib.util.find_spec("deepspeed") is None:
        ctx.log("pretrain deepspeed: skipped, deepspeed is not installed (make installs it)")
        return
    from llmdissect.suites.quick_train import run_and_log

    run_and_log(ctx, mn.PRETRAIN, OPTIONS)


def quick_steps() -> list[QuickStep]:
    return [QuickStep("pretrain-deepspeed-zero2", "pretrain of tiny-llama, DeepSpeed ZeRO-2 on 2 processes", _run)]
