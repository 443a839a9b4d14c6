"""The child side of `bench pretrain` / `bench finetune`: build, wrap, time, measure, gather.

Each step is timed between marks of the one timer: forward and backward of every
micro-batch, then the optimizer. On CUDA the marks are events read after the loop; on CPU
the host clock (CPU ops are synchronous). Nothing inside a timed step calls `.item()` or
prints: losses stay tensors until the timed steps are over.
"""
from __future__ import annotations

import contextlib
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.workloads.train_config import TrainConfig


def _build(cfg: TrainConfig, ctx: Any) -> tuple[Any, Any]:
    import torch

    from llmdissect.dtypes import torch_dtype
    from llmdissect.engines.wrap import wrap_model
    from llmdissect.modeling import build_model
    from llmdissect.techniques.lora import apply_lora
    from llmdissect.techniques.optimizers import make_optimizer
    from llmdissect.techniques.recompute import apply_recompute

    spec = cfg.spec()
    # Weights stay fp32 (master copy); bf16/fp16 run as autocast or FSDP mixed precision.
    model = build_model(spec, dtype="fp32", attn=cfg.attn, device=str(ctx.device), seed=cfg.seed)
    if cfg.method != "full":
        compute = torch_dtype(cfg.dtype)
        model = apply_lora(model, cfg.method, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets.split(","), compute)
        model.to(ctx.device)
    model.train()
    apply_recompute(model, cfg.recompute)
    if cfg.compile:
        model = torch.compile(model)
    if cfg.engine == "deepspeed":
        from llmdissect.engines.deepspeed import initialize

        model, optimizer, _ = initialize(model, cfg, ctx.world_size)
        return model, optimizer
    if cfg.tp > 1:
        from llmdissect.engines import tensor_parallel as tpe

        model = tpe.parallelize(model, cfg.tp, ctx.world_size, cfg.zero, cfg.offload, cfg.dtype, ctx.device.type)
        return model, tpe.make_optimizer(model, cfg.lr)
    finish_grads, local_params = None, ()
    if cfg.ep > 1:
        from llmdissect.engines import expert_parallel

        local_params, finish_grads = expert_parallel.parallelize(model, cfg.ep, ctx.rank, ctx.world_size)
    model = wrap_model(model, cfg.engine, cfg.zero, cfg.offload, cfg.dtype, ctx, ignore=local_params)
    model.llmdissect_finish_grads = finish_grads
    optimizer = make_optimizer(model, cfg.optimizer, cfg.lr, cfg.zero, ctx.distributed)
    return model, optimizer


def _batches(cfg: TrainConfig, ctx: Any) -> Any:
    from llmdissect.workloads import train_data

    # the global batch spans the data-parallel groups; tensor-parallel ranks share their group's rows
    spec, world, rank = cfg.spec(), ctx.world_size // cfg.tp, ctx.rank // cfg.tp
    if cfg.data:
        batch = train_data.file_global_batch(cfg.data, cfg.tokenizer, spec.vocab_size, cfg.grad_accum,
                                             cfg.micro_batch, world, cfg.seq)
    else:
        batch = train_data.synthetic_global_batch(spec.vocab_size, cfg.grad_accum, cfg.micro_batch, world,
                                                  cfg.seq, cfg.seed)
    return train_data.rank_rows(batch, rank, cfg.micro_batch).to(ctx.device)


class Stepper:
    """One optimizer step over `grad_accum` micro-batches, with phase marks."""

    def __init__(self, cfg: TrainConfig, model: Any, optimizer: Any, batch: Any, timer: Any, device_type: str):
        import torch

        from llmdissect.dtypes import torch_dtype

        self.cfg, self.model, self.optimizer, self.batch, self.timer = cfg, model, optimizer, batch, timer
        use_autocast = cfg.dtype != "fp32" and cfg.engine != "fsdp"
        self.autocast = (lambda: torch.autocast(device_type, dtype=torch_dtype(cfg.dtype))) if use_autocast \
            else contextlib.nullcontext

    def _sync_context(self, micro: int) -> Any:
        """DDP reduces gradients on the last micro-batch only."""
        if self.cfg.engine == "ddp" and micro < self.cfg.grad_accum - 1:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def step(self, before_optimizer: Any = None) -> tuple[list[Any], Any]:
        """Returns the marks [start, (fwd_end, bwd_end) per micro-batch, opt_start, end] and the loss tensor."""
        marks = [self.timer.now()]
        total = None
        for micro in range(self.cfg.grad_accum):
            ids = self.batch[micro]
            with self._sync_context(micro):
                with self.autocast():
                    loss = self.model(input_ids=ids, labels=ids, use_cache=False).loss / self.cfg.grad_accum
                marks.append(self.timer.now())
                loss.backward()
                marks.append(self.timer.now())
            total = loss.detach() if total is None else total + loss.detach()
        finish_grads = getattr(self.model, "llmdissect_finish_grads", None)
        if finish_grads is not None:  # expert parallelism: the experts' gradients, which DDP leaves alone
            finish_grads()
        if before_optimizer is not None:
            before_optimizer()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        marks.append(self.timer.now())
        return marks, total


def _phases(timer: Any, marks: list[Any]) -> dict[str, float]:
    fwd = bwd = 0.0
    prev = marks[0]
    for i in range(1, len(marks) - 1, 2):
        fwd += timer.elapsed_s(prev, marks[i])
        bwd += timer.elapsed_s(marks[i], marks[i + 1])
        prev = marks[i + 1]
    return {"step": timer.elapsed_s(marks[0], marks[-1]), "forward": fwd, "backward": bwd,
            "optimizer": timer.elapsed_s(marks[-2], marks[-1])}


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Entry point of the child process (see launch.run_child)."""
    import torch

    from llmdissect.engines.distributed import gather_objects, init_distributed, shutdown
    from llmdissect.measure.energy import EnergyMeter, energy_metrics
    from llmdissect.measure.env import capture_device_env
    from llmdissect.measure.timer import Timer
    from llmdissect.workloads.train_measure import memory_pass, summarize

    cfg = TrainConfig(**config)
    ctx = init_distributed(cfg.device, force=cfg.engine == "deepspeed")
    torch.manual_seed(cfg.seed)
    model, optimizer = _build(cfg, ctx)
    batch = _batches(cfg, ctx)
    timer = Timer(str(ctx.device))
    if cfg.engine == "deepspeed":
        from llmdissect.engines.deepspeed import DeepSpeedStepper

        stepper: Any = DeepSpeedStepper(cfg, model, batch, timer)
    else:
        stepper = Stepper(cfg, model, optimizer, batch, timer, ctx.device.type)
    losses, warm = [], []
    for _ in range(cfg.warmup):
        marks, loss = stepper.step()
        warm.append(_phases(timer, marks)["step"])
        losses.append(loss)
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    meter = EnergyMeter()  # the main rank meters this node over the timed steps
    if ctx.is_main:
        timer.synchronize()  # the warm-up's work is not the timed steps' energy
        meter.start()
    all_marks = []
    for _ in range(cfg.steps):
        marks, loss = stepper.step()
        all_marks.append(marks)
        losses.append(loss)
    timer.synchronize()
    joules = meter.stop() if ctx.is_main else None
    phases = [_phases(timer, m) for m in all_marks]
    memory = memory_pass(stepper, model, optimizer, ctx)
    loss_values = torch.stack(losses).float()
    if ctx.distributed:
        import torch.distributed as dist

        dist.all_reduce(loss_values, op=dist.ReduceOp.SUM)
        loss_values /= ctx.world_size
    per_rank = gather_objects(ctx, {"phases": phases, "warmup": warm, **memory})
    result = summarize(cfg, model, optimizer, per_rank, loss_values.tolist(), ctx) if ctx.is_main else {}
    if ctx.is_main:
        tokens = cfg.micro_batch * cfg.seq * cfg.grad_accum * (ctx.world_size // cfg.tp) * cfg.steps
        result["metrics"].update(energy_metrics(meter, joules, tokens, mn.ENERGY_J_PER_TRAINING_TOKEN))
        result["env"] = capture_device_env()
        if cfg.engine == "deepspeed":
            import os

            from llmdissect.engines.deepspeed import EXTENSIONS_ENV

            result["env"]["torch_extensions_dir"] = os.environ.get(EXTENSIONS_ENV)
    shutdown(ctx)
    return result
