"""The child side of `dissect pretrain|finetune`: the training child's build and step
(workloads.train_child: `_build`, `_batches`, `Stepper`), a few untraced steps, then the same
steps under torch.profiler with phase and module ranges, attributed by `dissect_attr`.

Phase ranges come from the step's own marks: `PhaseTimer` is the bench command's timer
whose every mark also closes the current `phase:*` range and opens the next (forward and
backward per micro-batch, then the optimizer), so the traced step is the bench step.
"""
from __future__ import annotations

from typing import Any

from llmdissect.workloads.dissect_attr import module_category


class PhaseTimer:
    """A Timer whose marks also delimit `phase:forward|backward|optimizer` profiler ranges."""

    def __init__(self, timer: Any, grad_accum: int):
        self.timer, self.g = timer, grad_accum
        self.count, self.open = 0, None

    def now(self) -> Any:
        import torch

        if self.open is not None:
            self.open.__exit__(None, None, None)
            self.open = None
        c = self.count % (2 * self.g + 2)
        mark = self.timer.now()
        if c < 2 * self.g + 1:
            name = "optimizer" if c == 2 * self.g else ("forward" if c % 2 == 0 else "backward")
            self.open = torch.profiler.record_function(f"phase:{name}")
            self.open.__enter__()
        self.count += 1
        return mark

    def elapsed_s(self, a: Any, b: Any) -> float:
        return self.timer.elapsed_s(a, b)

    def synchronize(self) -> None:
        self.timer.synchronize()


def add_module_ranges(model: Any, root: str = "loss") -> list[Any]:
    """Forward hooks opening `mod:<category>:<name>` ranges around the modules of interest
    (`root`: the category of the causal-LM's own forward: the loss in training)."""
    import torch

    handles = []
    for name, module in model.named_modules():
        cat = module_category(_strip(name))
        cat = root if cat == "loss" else cat
        if cat is None:
            continue
        label = f"mod:{cat}:{name or 'model'}"

        def pre(mod, args, label=label):
            rf = torch.profiler.record_function(label)
            rf.__enter__()
            mod.__dict__.setdefault("_llmdissect_ranges", []).append(rf)

        def post(mod, args, out):
            mod.__dict__["_llmdissect_ranges"].pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


def _strip(name: str) -> str:
    """PEFT wraps the model as base_model.model.<name>; the root stays ''."""
    for prefix in ("base_model.model.", "module."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return "" if name in ("base_model", "base_model.model", "module") else name


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Child entry: {"train": TrainConfig dump, "profile_steps": n, "trace": path or None}.

    After the warm-up, untraced and traced steps alternate (n of each), so that the profiling
    overhead is a paired comparison even on a busy machine; each traced step has its own
    profiler session (started and stopped outside the step). Untraced steps are timed by the
    bench command's Timer marks; the traced ones on the profiler's clock (`dissect_attr`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from llmdissect.engines.distributed import init_distributed, shutdown
    from llmdissect.measure.env import capture_device_env
    from llmdissect.measure.timer import Timer
    from llmdissect.progress import report
    from llmdissect.workloads.dissect_attr import add_top_ops, attribute, profile_metrics
    from llmdissect.workloads.train_child import Stepper, _batches, _build, _phases
    from llmdissect.workloads.train_config import TrainConfig

    cfg = TrainConfig(**config["train"])
    n = config["profile_steps"]
    ctx = init_distributed(cfg.device)
    torch.manual_seed(cfg.seed)
    model, optimizer = _build(cfg, ctx)
    batch = _batches(cfg, ctx)
    timer = Timer(str(ctx.device))
    stepper = Stepper(cfg, model, optimizer, batch, timer, ctx.device.type)
    total = cfg.warmup + 2 * n
    for i in range(cfg.warmup):
        report(config, i, total, "warm-up")
        stepper.step()
    handles = add_module_ranges(model)
    phase_timer = PhaseTimer(timer, cfg.grad_accum)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    untraced_s, steps, trace, ops = [], [], config.get("trace"), {}
    for i in range(n):
        report(config, cfg.warmup + 2 * i, total, "untraced step")
        stepper.timer = timer
        marks, _ = stepper.step()
        timer.synchronize()
        untraced_s.append(_phases(timer, marks)["step"])
        report(config, cfg.warmup + 2 * i + 1, total, "traced step")
        stepper.timer = phase_timer
        with profile(activities=activities) as prof:
            stepper.step()
            phase_timer.synchronize()
        result = attribute(prof.events(), 1, top_n=1000)
        steps += result["steps"]
        add_top_ops(ops, result)
        if i == 0 and trace and ctx.rank == 0:
            prof.export_chrome_trace(trace)
    for h in handles:
        h.remove()
    shutdown(ctx)
    return {"metrics": profile_metrics(steps, ops, untraced_s, trace), "env": capture_device_env()}

