"""Quick-suite step: DeepSpeed ZeRO-2 pre-training of tiny-llama on 2 processes (gloo).

Its CPU ops are compiled once into `engines.deepspeed.ops_dir()` (make does it at set-up),
so the step costs the run itself. Skipped with a line where deepspeed is not installed.
"""
from __future__ import annotations

import importlib.util

from llmdissect.suites.quick import QuickContext, QuickStep

OPTIONS = dict(model="tiny-llama", seq=128, steps=3, warmup=1, device="cpu", micro_batch=1, nproc=2,
               engine="deepspeed", zero=2)


def _run(ctx: QuickContext) -> None:
    if importlib.util.find_spec("deepspeed") is None:
        ctx.log("pretrain deepspeed: skipped, deepspeed is not installed (make installs it)")
        return
    from llmdissect.workloads.train_runner import prepare, run_training

    record, _ = run_training(prepare("pretrain", **OPTIONS), timeout_s=300)
    ctx.save(record)
    if record.status != "ok":
        raise RuntimeError(f"deepspeed ZeRO-2 ended {record.status}: {record.error}")
    m = record.metrics
    ctx.log(f"pretrain deepspeed ZeRO-2 x{m['world_size']}: {m['tokens_per_s']:.0f} tokens/s, "
            f"step {m['step_time_s']['median'] * 1e3:.0f} ms, peak {m['peak_memory_bytes'] / 2**20:.0f} MiB")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("pretrain-deepspeed-zero2", "pretrain of tiny-llama, DeepSpeed ZeRO-2 on 2 processes", _run)]
