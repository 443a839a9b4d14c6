"""Memory and the summary of a training run, gathered over ranks (docs/metrics.md "Training")."""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.measure.stats import Stats
from llmdissect.workloads.train_config import TrainConfig


def _local(t: Any) -> Any:
    return t.to_local() if hasattr(t, "to_local") else t


def memory_pass(stepper: Any, model: Any, optimizer: Any, ctx: Any) -> dict[str, Any]:
    """Peak memory of a step, plus checks that frozen weights get no gradients.

    CUDA: the allocator's peaks over the timed steps. CPU: one more (untimed) step under
    the live-tensor tracker; its peak plus what was live when it began (parameters and
    optimizer state: gradients are freed between steps) is `peak_memory_bytes`.
    """
    from llmdissect.measure.memory import cuda_peaks, live_tensor_tracker, peak_rss_bytes, tensor_bytes
    from llmdissect.techniques.optimizers import params_with_state, state_tensors

    params = list(model.parameters())
    seen: dict[str, int] = {}

    def check_grads() -> None:
        seen["frozen_params_with_grad"] = sum(1 for p in params if not p.requires_grad and p.grad is not None)
        seen["trainable_params_without_grad"] = sum(1 for p in params if p.requires_grad and p.grad is None)

    out: dict[str, Any] = {}
    if ctx.device.type == "cuda":
        out.update(cuda_peaks(ctx.device))
        stepper.step(before_optimizer=check_grads)
    else:
        static = stepper.static_tensors() if hasattr(stepper, "static_tensors") else \
            [_local(p) for p in params] + state_tensors(optimizer)
        baseline = tensor_bytes(static)
        tracker = live_tensor_tracker()
        with tracker:
            stepper.step(before_optimizer=check_grads)
        out[mn.PEAK_MEMORY_BYTES] = baseline + tracker.peak_bytes
        out["static_memory_bytes"] = baseline
    out[mn.PEAK_RSS_BYTES] = peak_rss_bytes()
    out["optimizer_state_params"] = stepper.state_params() if hasattr(stepper, "state_params") \
        else params_with_state(optimizer)
    out.update(seen)
    return out


def _slowest(per_rank: list[dict[str, Any]], phase: str) -> list[float]:
    """Per step, the slowest rank's time (a step ends when the last rank ends)."""
    steps = len(per_rank[0]["phases"])
    return [max(r["phases"][i][phase] for r in per_rank) for i in range(steps)]


def summarize(cfg: TrainConfig, model: Any, optimizer: Any, per_rank: list[dict[str, Any]], losses: list[float],
              ctx: Any) -> dict[str, Any]:
    from llmdissect.dtypes import cpu_dtype_note
    from llmdissect.workloads import train_metrics as tm

    spec = cfg.spec()
    world = ctx.world_size
    dp = world // cfg.tp  # tensor-parallel ranks share their data-parallel group's tokens
    step = Stats.of(_slowest(per_rank, "step"))
    tokens_per_step = cfg.micro_batch * cfg.seq * cfg.grad_accum * dp
    tokens_per_s = tokens_per_step / step.median
    targets = cfg.lora_targets.split(",")
    flops, hardware_flops = tm.flops_per_token(spec, cfg.seq, cfg.method, cfg.lora_rank, targets, cfg.recompute)
    peak, peak_source = tm.device_peak(ctx.device.type, cfg.dtype)
    # On a CPU all processes share one device whose measured peak covers every core they
    # use; on GPUs each process drives its own device.
    devices = world if ctx.device.type == "cuda" else 1
    mfu = tm.utilisation(tokens_per_s, flops, peak, devices)
    hfu = tm.utilisation(tokens_per_s, hardware_flops, peak, devices)
    # ZeRO-3 leaves a DeepSpeed parameter empty on every rank; ds_numel keeps its full size;
    # under --ep a rank holds 1/ep of the routed experts (expert_parallel marks them)
    trainable = sum(getattr(p, "ds_numel", p.numel()) * getattr(p, "llmdissect_shards", 1)
                    for p in model.parameters() if p.requires_grad)
    inner = getattr(model, "module", model)
    metrics: dict[str, Any] = {
        mn.STEP_TIME_S: step.to_dict(),
        mn.FORWARD_S: Stats.of(_slowest(per_rank, "forward")).to_dict(),
        mn.BACKWARD_S: Stats.of(_slowest(per_rank, "backward")).to_dict(),
        mn.OPTIMIZER_S: Stats.of(_slowest(per_rank, "optimizer")).to_dict(),
        "first_step_s": per_rank[0]["warmup"][0] if per_rank[0]["warmup"] else None,
        "warmup_step_s": [max(r["warmup"][i] for r in per_rank) for i in range(len(per_rank[0]["warmup"]))],
        "tokens_per_step": tokens_per_step,
        mn.TOKENS_PER_S: tokens_per_s,
        mn.TOKENS_PER_S_PER_DEVICE: tokens_per_s / devices,
        "samples_per_s": cfg.micro_batch * cfg.grad_accum * dp / step.median,
        mn.MODEL_FLOPS_PER_TOKEN: flops,
        "hardware_flops_per_token": hardware_flops,
        "peak_flops_per_s": peak,
        "peak_flops_source": peak_source,
        mn.MFU: mfu,
        mn.HFU: hfu,
        mn.PEAK_MEMORY_BYTES: max(r[mn.PEAK_MEMORY_BYTES] for r in per_rank),
        mn.PEAK_RSS_BYTES: max(r[mn.PEAK_RSS_BYTES] for r in per_rank),
        "trainable_params": trainable,
        "total_params": spec.params,
        "optimizer_state_params": sum(r["optimizer_state_params"] for r in per_rank)
        if cfg.zero == 1 or cfg.engine == "deepspeed" and cfg.zero >= 1 else per_rank[0]["optimizer_state_params"],
        "frozen_params_with_grad": max(r.get("frozen_params_with_grad", 0) for r in per_rank),
        mn.LOSS: losses,
        "world_size": world,
        mn.DEVICES: devices,
    }
    if "static_memory_bytes" in per_rank[0]:
        metrics["static_memory_bytes"] = max(r["static_memory_bytes"] for r in per_rank)
    if mn.PEAK_RESERVED_BYTES in per_rank[0]:
        metrics[mn.PEAK_RESERVED_BYTES] = max(r[mn.PEAK_RESERVED_BYTES] for r in per_rank)
    if hasattr(inner, "get_nb_trainable_parameters"):
        metrics["peft_trainable_params"] = int(inner.get_nb_trainable_parameters()[0])
    metrics.update(tm.check_mfu(mfu, mn.MFU))
    note = cpu_dtype_note(cfg.dtype, ctx.device.type)
    if note:
        metrics["note"] = note
    return {"metrics": metrics}
