"""Refuse, before launching, a training run that cannot fit in this machine's memory.

The bound is the analytical model's (perfmodel): model states under the run's ZeRO stage
plus the logits buffers, which are the part no technique here removes. A run that passes
can still run out of memory; it is then recorded as `oom` by the launcher.
"""
from __future__ import annotations

from llmdissect.errors import UserError
from llmdissect.workloads.train_config import TrainConfig


def available_memory_bytes(device: str) -> int:
    if device == "cuda":
        from llmdissect.measure.env import nvidia_smi

        gpus = nvidia_smi()
        if gpus:
            mib = float(gpus[0]["memory"].split()[0])
            return int(mib * 2**20)
    import psutil

    return int(psutil.virtual_memory().available)


def required_memory_bytes(cfg: TrainConfig) -> float:
    """A lower bound on one process's memory for this run."""
    from llmdissect.dtypes import dtype_bytes
    from llmdissect.perfmodel.states import model_state_bytes

    spec = cfg.spec()
    if cfg.method == "full":
        # Mixed precision keeps fp32 masters here (autocast), so states are fp32-sized.
        states = model_state_bytes(spec.params, 4, cfg.zero if cfg.engine != "single" else 0, cfg.world_size)
        if cfg.offload != "none" and cfg.device == "cpu":
            states = states * cfg.world_size  # offloaded shards share the same host memory
    else:
        states = spec.params * (0.5 if cfg.method == "qlora" else dtype_bytes("fp32"))
    # logits in fp32, their gradient, and the loss's upcast copy
    logits = 3 * cfg.micro_batch * cfg.seq * spec.vocab_size * 4
    processes_sharing_memory = cfg.nproc if cfg.device == "cpu" else 1
    return (states + logits) * processes_sharing_memory


def check_fits(cfg: TrainConfig) -> None:
    need, have = required_memory_bytes(cfg), available_memory_bytes(cfg.device)
    if need > have:
        raise UserError(f"{cfg.model} with micro-batch {cfg.micro_batch} x seq {cfg.seq} needs at least "
                        f"{need / 2**30:.1f} GiB (model states and logits) but this {cfg.device} has "
                        f"{have / 2**30:.1f} GiB available; try a smaller model, batch or a higher ZeRO stage")
