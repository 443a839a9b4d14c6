"""Quick-suite steps of measured training: tiny-llama pre-training on one process and with
FSDP2 ZeRO-3 on two, and a LoRA fine-tuning."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

COMMON = dict(model="tiny-llama", seq=128, steps=5, warmup=1, device="cpu")
RUNS = {
    "pretrain-single": (mn.PRETRAIN, dict(micro_batch=2)),
    "pretrain-fsdp-zero3": (mn.PRETRAIN, dict(micro_batch=1, nproc=2, zero=3)),
    "finetune-lora": (mn.FINETUNE, dict(micro_batch=2, method="lora", lora_rank=8)),
}


def run_and_log(ctx: QuickContext, kind: str, options: dict) -> None:
    """One training point: run it, store its record, log its headline (raise if not ok)."""
    from llmdissect.workloads.train_launch import prepare, run_training

    record, _ = run_training(prepare(kind, **options), timeout_s=300)
    ctx.save(record)
    if record.status != "ok":
        raise RuntimeError(f"{kind} {record.config.get('engine')} ended {record.status}: {record.error}")
    m = record.metrics
    ctx.log(f"{kind} {record.config['engine']} ZeRO-{record.config['zero']} x{m['world_size']}: "
            f"{m[mn.TOKENS_PER_S]:.0f} tokens/s, step {m[mn.STEP_TIME_S]['median'] * 1e3:.0f} ms, "
            f"peak {m[mn.PEAK_MEMORY_BYTES] / 2**20:.0f} MiB")


def _runner(kind: str, options: dict):
    def run(ctx: QuickContext) -> None:
        run_and_log(ctx, kind, {**COMMON, **options})
    return run


def quick_steps() -> list[QuickStep]:
    return [QuickStep(name, f"{kind} of tiny-llama", _runner(kind, opts)) for name, (kind, opts) in RUNS.items()]
