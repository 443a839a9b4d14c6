"""The DeepSpeed config of a run: generated from our options, merged with a user's `--ds-config`.

No torch and no deepspeed import here: the parent validates in milliseconds, and the child
builds the very same dict (`effective_ds_config`), which is what the record stores.

What our options pin (a user's file may repeat these values but not contradict them):

| key | from |
| --- | --- |
| train_micro_batch_size_per_gpu, gradient_accumulation_steps | --micro-batch, --grad-accum |
| train_batch_size | micro-batch x grad-accum x data-parallel size |
| zero_optimization.stage | --zero |
| zero_optimization.offload_optimizer.device / offload_param.device | --offload optimizer / params |
| bf16.enabled, fp16.enabled | --dtype |
| optimizer.type, optimizer.params.lr | --optimizer adamw, --lr |

Everything else in the user's file (bucket sizes, overlap_comm, gradient_clipping, ...) is
kept as given. Activation checkpointing is our `--recompute` (transformers' checkpointing of
each decoder layer, or our selective attention core), applied before DeepSpeed wraps the model.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError

# torch.optim.AdamW's defaults, so DeepSpeed (torch AdamW or DeepSpeedCPUAdam) and FSDP2 step alike
ADAMW_DEFAULTS = {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}


def generated(cfg: Any, dp: int) -> dict[str, Any]:
    """The config our options ask for (`cfg` a TrainConfig; `dp` the data-parallel size)."""
    pin = cfg.device == "cuda"  # pinned host memory needs a GPU
    # DeepSpeed's default buckets hold 5e8 elements (2 GB in fp32), allocated whole even for a
    # small model: no bucket here is larger than the model itself.
    bucket = int(min(5e8, cfg.spec().params))
    zero: dict[str, Any] = {"stage": cfg.zero, "reduce_bucket_size": bucket}
    if cfg.zero in (1, 2):
        zero["allgather_bucket_size"] = bucket
    if cfg.zero == 3:
        zero["stage3_prefetch_bucket_size"] = bucket
    if cfg.offload in ("optimizer", "params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if cfg.offload == "params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    params: dict[str, Any] = {"lr": cfg.lr, **ADAMW_DEFAULTS}
    if cfg.offload == "none":
        params["torch_adam"] = True  # torch.optim.AdamW; with offload DeepSpeed picks DeepSpeedCPUAdam
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": cfg.grad_accum,
        "train_batch_size": cfg.micro_batch * cfg.grad_accum * dp,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.dtype == "bf16"},
        "fp16": {"enabled": cfg.dtype == "fp16", "initial_scale_power": 16},
        "optimizer": {"type": "AdamW", "params": params},
        "gradient_clipping": 0.0,
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }


def load_user(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--ds-config file not found: {path}")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"--ds-config {path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"--ds-config {path}: expected a JSON object at the top level")
    return data


def _get(d: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _pinned(cfg: Any, dp: int) -> list[tuple[str, Any, str]]:
    """(key, value our options require, the option to change) for every pinned key."""
    offload_opt = "cpu" if cfg.offload in ("optimizer", "params") else "none"
    offload_par = "cpu" if cfg.offload == "params" else "none"
    return [
        ("train_micro_batch_size_per_gpu", cfg.micro_batch, "--micro-batch"),
        ("gradient_accumulation_steps", cfg.grad_accum, "--grad-accum"),
        ("train_batch_size", cfg.micro_batch * cfg.grad_accum * dp, "--micro-batch x --grad-accum x processes"),
        ("zero_optimization.stage", cfg.zero, "--zero"),
        ("zero_optimization.offload_optimizer.device", offload_opt, "--offload"),
        ("zero_optimization.offload_param.device", offload_par, "--offload"),
        ("bf16.enabled", cfg.dtype == "bf16", "--dtype"),
        ("fp16.enabled", cfg.dtype == "fp16", "--dtype"),
        ("optimizer.params.lr", cfg.lr, "--lr"),
    ]


def check_user(user: dict[str, Any], cfg: Any, dp: int, path: str) -> None:
    """Exit 2 on an unknown ZeRO stage, a foreign optimizer, or a value our options contradict."""
    stage = _get(user, "zero_optimization.stage")
    if stage is not None and (isinstance(stage, bool) or stage not in (0, 1, 2, 3)):
        raise UserError(f"--ds-config {path}: unknown ZeRO stage {stage!r} (DeepSpeed has stages 0, 1, 2, 3)")
    zero = user.get("zero_optimization")
    if zero is not None and not isinstance(zero, dict):
        raise UserError(f"--ds-config {path}: zero_optimization must be an object")
    opt_type = _get(user, "optimizer.type")
    if opt_type is not None and str(opt_type).lower() not in ("adam", "adamw"):
        raise UserError(f"--ds-config {path}: optimizer {opt_type!r} is not AdamW, which --optimizer adamw measures")
    for key, ours, option in _pinned(cfg, dp):
        theirs = _get(user, key)
        if theirs is None:
            continue
        if key.endswith(".device") and str(theirs).lower() == ours:
            continue
        if isinstance(ours, bool) != isinstance(theirs, bool) or theirs != ours:
            raise UserError(f"--ds-config {path}: {key} is {theirs!r} but the options ask for {ours!r} ({option})")


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def effective_ds_config(cfg: Any, dp: int) -> dict[str, Any]:
    """Ours, with the user's file (checked) merged over it: what DeepSpeed is given."""
    ours = generated(cfg, dp)
    if not cfg.ds_config:
        return ours
    user = load_user(cfg.ds_config)
    check_user(user, cfg, dp, cfg.ds_config)
    merged = _merge(ours, user)
    # a user's offload section with device "none" must not leave our pin settings dangling
    for section in ("offload_optimizer", "offload_param"):
        if _get(merged, f"zero_optimization.{section}.device") == "none":
            merged["zero_optimization"].pop(section)
    return merged


def validate_deepspeed(cfg: Any, dp: int) -> None:
    """The checks of --engine deepspeed that need no torch (called from TrainConfig validation)."""
    if cfg.offload == "optimizer" and cfg.zero == 0:
        raise UserError("--offload optimizer on deepspeed needs ZeRO: use --zero 1, 2 or 3")
    if cfg.offload == "params" and cfg.zero != 3:
        raise UserError("--offload params on deepspeed needs --zero 3 (parameters are partitioned only there)")
    if cfg.optimizer != "adamw":
        raise UserError(f"--optimizer {cfg.optimizer} is not available on --engine deepspeed: use adamw "
                        "(torch AdamW, or DeepSpeedCPUAdam when offloading)")
    if cfg.compile:
        raise UserError("--compile is not supported with --engine deepspeed here")
    effective_ds_config(cfg, dp)
