"""`--engine deepspeed`: DeepSpeed's engine at ZeRO stage 0 to 3, with CPU offload.

The config comes from `deepspeed_config.effective_ds_config` (our options, merged with a
user's `--ds-config`). DeepSpeed builds the optimizer from it: torch's AdamW, or
DeepSpeedCPUAdam when the optimizer state is offloaded; bf16/fp16 are DeepSpeed's own
mixed precision (half weights, fp32 master copy in the optimizer), so no autocast here.

DeepSpeed compiles its ops (CPU Adam) on first use. They go to a known folder,
`$TORCH_EXTENSIONS_DIR` when set, else `~/.cache/llmdissect/torch_extensions` (not the
per-run state dir, so that every run and every test reuses one build).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

EXTENSIONS_ENV = "TORCH_EXTENSIONS_DIR"


def ops_dir() -> Path:
    """Where DeepSpeed's compiled ops are built once and reused."""
    if os.environ.get(EXTENSIONS_ENV):
        return Path(os.environ[EXTENSIONS_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llmdissect" / "torch_extensions"


def initialize(model: Any, cfg: Any, dp: int) -> tuple[Any, Any, dict[str, Any]]:
    """(DeepSpeed engine, its optimizer, the config it was given). The process group must exist."""
    os.environ.setdefault(EXTENSIONS_ENV, str(ops_dir()))
    import deepspeed

    from llmdissect.engines.deepspeed_config import effective_ds_config

    ds_config = effective_ds_config(cfg, dp)
    params = [p for p in model.parameters() if p.requires_grad]
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=ds_config,
                                                   dist_init_required=False)
    return engine, optimizer, ds_config


class DeepSpeedStepper:
    """One optimizer step of a DeepSpeed engine over `grad_accum` micro-batches.

    `engine.backward` scales the loss by 1/grad_accum itself; `engine.step()` after each
    micro-batch only counts it, except on the last, where gradients are reduced (ZeRO-2/3:
    reduce-scattered) and the optimizer steps. Marks as train.Stepper's:
    [start, (forward end, backward end) per micro-batch, end].
    """

    def __init__(self, cfg: Any, engine: Any, batch: Any, timer: Any):
        self.cfg, self.engine, self.batch, self.timer = cfg, engine, batch, timer

    def step(self, before_optimizer: Any = None) -> tuple[list[Any], Any]:
        marks = [self.timer.now()]
        total = None
        accum = self.cfg.grad_accum
        for micro in range(accum):
            ids = self.batch[micro]
            loss = self.engine(input_ids=ids, labels=ids, use_cache=False).loss
            marks.append(self.timer.now())
            self.engine.backward(loss)
            if micro < accum - 1:
                self.engine.step()
            marks.append(self.timer.now())
            part = loss.detach().float() / accum
            total = part if total is None else total + part
        if before_optimizer is not None:
            before_optimizer()
        self.engine.step()
        marks.append(self.timer.now())
        return marks, total

    def static_tensors(self) -> list[Any]:
        """What lives between steps on this rank: parameters (ZeRO-3: this rank's partition),
        the flat fp32 partitions the optimizer steps, and its state (deduplicated by storage)."""
        import torch

        out = [getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p for p in self.engine.module.parameters()]
        opt = self.engine.optimizer
        while opt is not None:
            for group in getattr(opt, "param_groups", []):
                out.extend(group["params"])
            state = getattr(opt, "state", {})
            for s in (state.values() if isinstance(state, dict) else []):
                if isinstance(s, dict):
                    out.extend(v for v in s.values() if isinstance(v, torch.Tensor))
            opt = getattr(opt, "optimizer", None)
        return [t for t in out if isinstance(t, torch.Tensor)]

    def state_params(self) -> int:
        """Elements with optimizer state on this rank (the innermost optimizer: this rank's partitions)."""
        opt = self.engine.optimizer
        while getattr(opt, "optimizer", None) is not None:
            opt = opt.optimizer
        return sum(p.numel() for p, s in getattr(opt, "state", {}).items() if s)


def numel(p: Any) -> int:
    """A parameter's full element count (ZeRO-3 partitions leave `p` empty; `ds_numel` keeps it)."""
    return int(getattr(p, "ds_numel", p.numel()))


def build_ops() -> Path:
    """Compile DeepSpeed's CPU ops (CPU Adam, shared-memory collectives) into ops_dir() now,
    so that no run pays for it (`python -m llmdissect.engines.deepspeed`, run by `make`)."""
    os.environ.setdefault(EXTENSIONS_ENV, str(ops_dir()))
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    for name in ("CPUAdamBuilder", "ShareMemCommBuilder"):
        builder = accelerator.create_op_builder(name)
        if builder is not None and builder.is_compatible():
            builder.load(verbose=False)
    return Path(os.environ[EXTENSIONS_ENV])


if __name__ == "__main__":
    print(f"DeepSpeed ops built in {build_ops()}")
