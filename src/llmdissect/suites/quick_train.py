"""Quick-suite steps of measured training: tiny-llama pre-training on one process and with
FSDP2 ZeRO-3 on two, and a LoRA fine-tuning."""
from __future__ import annotations

from llmdissect.suites.quick import QuickContext, QuickStep

COMMON = dict(model="tiny-llama", seq=128, steps=3, warmup=1, device="cpu")
RUNS = {
    "pretrain-single": ("pretrain", dict(micro_batch=2)),
    "pretrain-fsdp-zero3": ("pretrain", dict(micro_batch=1, nproc=2, zero=3)),
    "finetune-lora": ("finetune", dict(micro_batch=2, method="lora", lora_rank=8)),
}


def _runner(kind: str, options: dict):
    def run(ctx: QuickContext) -> None:
        from llmdissect.workloads.train_runner import prepare, run_training

        record, _ = run_training(prepare(kind, **COMMON, **options), timeout_s=300)
        ctx.save(record)
        if record.status != "ok":
            raise RuntimeError(f"{kind} ended {record.status}: {record.error}")
        m = record.metrics
        ctx.log(f"{kind} {record.config['engine']} x{m['world_size']}: {m['tokens_per_s']:.0f} tokens/s, "
                f"step {m['step_time_s']['median'] * 1e3:.0f} ms, peak {m['peak_memory_bytes'] / 2**20:.0f} MiB")
    return run


def quick_steps() -> list[QuickStep]:
    return [QuickStep(name, f"{kind} of tiny-llama", _runner(kind, opts)) for name, (kind, opts) in RUNS.items()]
