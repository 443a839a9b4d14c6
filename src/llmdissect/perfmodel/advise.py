"""Search the configuration space with the estimate's own formulas, vectorized with numpy.

The grid (ZeRO stage, offload, recomputation, attention, micro-batch, gradient accumulation,
TP x PP split, the expert-parallel degree of a mixture of experts, and for fine-tuning LoRA
rank and base quantization; batch, TP and weight quantization for inference) becomes one
numpy array per knob. `trainmodel` / `infermodel` evaluate every configuration at once (their
functions are plain arithmetic), so the search
costs a few array passes instead of one Python call per configuration.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.ceilings import Machine, with_weight_stream_scale
from llmdissect.perfmodel.config import sharded_collective_calls
from llmdissect.perfmodel.infermodel import infer_memory, infer_time
from llmdissect.perfmodel.trainmodel import train_memory, train_time
from llmdissect.specs.models import ModelSpec

ZEROS = (0, 1, 2, 3)
OFFLOADS = ("none", "optimizer", "params")
RECOMPUTES = ("none", "selective", "full")
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
GRAD_ACCUMS = (1, 4, 16)
LORA_RANKS = (8, 16, 64)
INFER_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
GOALS = ("throughput", "memory", "latency")


@dataclass
class Space:
    """Configurations as parallel arrays (one entry per configuration) plus their results."""

    knobs: dict[str, np.ndarray]
    results: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.knobs.values())))

    def row(self, i: int) -> dict:
        out = {k: v[i].item() for k, v in self.knobs.items()}
        out.update({k: v[i].item() for k, v in self.results.items()})
        return out


def parallel_splits(m: ModelSpec, devices: int) -> list[tuple[int, int]]:
    """(tp, pp) pairs that divide the devices, the heads (TP) and fit the layers (PP)."""
    out = []
    for tp in range(1, devices + 1):
        if devices % tp or m.num_heads % tp or (m.num_kv_heads % tp and tp % m.num_kv_heads):
            continue
        for pp in range(1, devices // tp + 1):
            if (devices // tp) % pp == 0 and pp <= m.num_layers:
                out.append((tp, pp))
    return out


def _grid(**axes) -> dict[str, np.ndarray]:
    names = list(axes)
    cols = np.array(list(itertools.product(*(range(len(axes[n])) for n in names))), dtype=np.int64).T
    return {n: np.asarray(axes[n])[cols[i]] for i, n in enumerate(names)}


def train_space(kind: str, m: ModelSpec, mach: Machine, seq: int, e: float, *, repeat: int = 1) -> Space:
    """Every valid training configuration, evaluated. `repeat` tiles the grid (benchmarks)."""
    devices = mach.platform.num_devices
    splits = parallel_splits(m, devices)
    # sdpa | eager | flash (GPUs: flash is sdpa's kernel)
    attns = (0, 1) if mach.platform.device.kind != "gpu" else (2, 1)
    lora = (0,) if kind == mn.PRETRAIN else (0, *LORA_RANKS)
    quants = ("none",) if kind == mn.PRETRAIN else ("none", "nf4")
    g = _grid(split=np.arange(len(splits)), zero=ZEROS, off=(0, 1, 2), rc=(0, 1, 2), attn=attns,
              b=MICRO_BATCHES, ga=GRAD_ACCUMS, rank=lora, quant=np.arange(len(quants)),
              ep=expert_degrees(m, devices))
    split_dp = np.array([devices // (s[0] * s[1]) for s in splits])
    valid = (((g["off"] < 1) | (g["zero"] >= 1)) & ((g["off"] < 2) | (g["zero"] == 3))
             & ((g["quant"] == 0) | (g["rank"] > 0)) & (split_dp[g["split"]] % g["ep"] == 0))
    g = {k: np.tile(v[valid], repeat) for k, v in g.items()}
    tp = np.array([s[0] for s in splits])[g["split"]]
    pp = np.array([s[1] for s in splits])[g["split"]]
    g.update(tp=tp, pp=pp, dp=devices // (tp * pp))
    per_rank = wt.lora_params(m, 1)
    frozen = np.array([wt.model_weight_bytes(m, q, e) for q in quants])[g["quant"]]
    layer_bytes = np.array([wt.layer_read_bytes(m, q, e) for q in quants])[g["quant"]]
    lora_on = (g["rank"] > 0) * 1
    kw = dict(b=g["b"], s=seq, ga=g["ga"], e=e, eager=(g["attn"] == 1) * 1, rc=g["rc"], zero=g["zero"],
              off=g["off"], tp=tp, pp=pp, dp=g["dp"], optimizer="adamw", lora=lora_on,
              lora_params=g["rank"] * per_rank, frozen_weight_bytes=frozen * lora_on, ep=g["ep"])
    # FSDP (ZeRO-2/3 without optimizer-only offload: config.TrainSetup.engine) splits its
    # collectives per layer, DeepSpeed (optimizer-only offload) per bucket, and steps one flat
    # partition (TrainSetup.sharded_calls, flat_optimizer), holding its own buffers too
    fsdp = ((g["zero"] >= 2) & (g["off"] != 1)) * 1
    deepspeed = (g["off"] == 1) * 1
    targets = wt.resolve_lora_targets(m, wt.LORA_TARGETS_DEFAULT)
    mem = train_memory(m, mach, flat=deepspeed, lora_rank=g["rank"], lora_targets=targets, **kw)
    calls = sharded_collective_calls(m, fsdp, deepspeed, tp, pp)
    t = train_time(m, mach, layer_weight_bytes=layer_bytes, sharded_calls=calls, flat=deepspeed, fsdp=fsdp,
                   lora_rank=g["rank"], lora_targets=targets, **kw)
    host_cap = mach.platform.host_memory_bytes or np.inf
    fits_dev = mem[mn.TOTAL_BYTES] <= mach.platform.device.memory_bytes
    fits_host = mem["host_bytes"] * devices <= host_cap
    results = {mn.TOTAL_BYTES: mem[mn.TOTAL_BYTES], "host_bytes": mem["host_bytes"] * devices,
               mn.TOKENS_PER_S: t[mn.TOKENS_PER_S], mn.STEP_S: t[mn.TIME][mn.STEP_S], mn.MFU: t[mn.MFU],
               "fits_device": fits_dev, "fits_host": fits_host, mn.FITS: fits_dev & fits_host}
    knobs = {"zero": g["zero"], "offload": np.array(OFFLOADS)[g["off"]], "recompute": np.array(RECOMPUTES)[g["rc"]],
             "attn": np.array(("sdpa", "eager", "flash"))[g["attn"]], "micro_batch": g["b"], "grad_accum": g["ga"],
             "tp": tp, "pp": pp}
    if kind == mn.FINETUNE:
        knobs.update(lora_rank=g["rank"], quant=np.array(quants)[g["quant"]])
    if m.is_moe:
        knobs["ep"] = g["ep"]
    return Space(knobs, results)


def expert_degrees(m: ModelSpec, devices: int) -> list[int]:
    """The expert-parallel degrees to search: 1, and for a MoE model every degree that divides
    both its routed experts and the devices (moe.check_expert_parallel also needs it to divide
    each configuration's data-parallel ranks, which the search filters)."""
    if not m.is_moe:
        return [1]
    return [ep for ep in range(1, devices + 1) if devices % ep == 0 and m.num_experts % ep == 0]


def _pick(options: list, index):
    """Row by row, the value of option `index[row]` (nested dicts of equal-shaped arrays)."""
    first = options[0]
    if isinstance(first, dict):
        return {k: _pick([o[k] for o in options], index) for k in first}
    return np.choose(index, [np.broadcast_to(o, np.shape(index)) for o in options])


def infer_space(m: ModelSpec, mach: Machine, n_in: int, n_out: int, e: float, *, repeat: int = 1) -> Space:
    """Every valid inference configuration (batch, TP, weight quantization, attention)."""
    devices = mach.platform.num_devices
    tps = [tp for tp, pp in parallel_splits(m, devices) if pp == 1]
    quants = ("none", "int8-weight", "nf4")
    attns = (0, 1) if mach.platform.device.kind != "gpu" else (2, 1)
    g = _grid(b=INFER_BATCHES, tp=tps, quant=np.arange(len(quants)), attn=attns)
    g = {k: np.tile(v, repeat) for k, v in g.items()}
    weights = np.array([wt.model_weight_bytes(m, q, e) for q in quants])[g["quant"]]
    layer = np.array([wt.layer_read_bytes(m, q, e) for q in quants])[g["quant"]]
    kw = dict(b=g["b"], n_in=n_in, n_out=n_out, e=e, eager=(g["attn"] == 1) * 1, tp=g["tp"])
    mem, _ = infer_memory(m, mach, weight_bytes=weights, **kw)
    # each scheme's kernels stream its weights at their own rate (weights.WEIGHT_STREAM_SCALE): a
    # machine per scheme, each row taking its own scheme's times
    kind = mach.platform.device.kind
    per_quant = [infer_time(m, with_weight_stream_scale(mach, wt.weight_stream_scale(q, kind)),
                            dp=devices // g["tp"], layer_weights=layer, **kw) for q in quants]
    t = _pick(per_quant, g["quant"])
    fits = mem[mn.TOTAL_BYTES] <= mach.platform.device.memory_bytes
    results = {mn.TOTAL_BYTES: mem[mn.TOTAL_BYTES], mn.TOKENS_PER_S: t[mn.TOKENS_PER_S],
               mn.TTFT_S: t[mn.TIME][mn.TTFT_S], mn.TPOT_S: t[mn.TIME][mn.TPOT_S], mn.MFU: t[mn.MFU],
               "fits_device": fits, mn.FITS: fits}
    knobs = {"batch": g["b"], "tp": g["tp"], "quant": np.array(quants)[g["quant"]],
             "attn": np.array(("sdpa", "eager", "flash"))[g["attn"]]}
    return Space(knobs, results)


def pareto_front(throughput: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Indices of configurations no other beats on both throughput (higher) and memory
    (lower), ordered by memory."""
    order = np.lexsort((-throughput, memory))
    best_before = np.maximum.accumulate(np.concatenate(([-np.inf], throughput[order][:-1])))
    return order[throughput[order] > best_before]


def ranking(space: Space, goal: str) -> np.ndarray:
    """Indices of fitting configurations, best first for `goal`."""
    if goal not in GOALS:
        raise UserError(f"unknown --goal {goal!r}; choose one of {', '.join(GOALS)}")
    r = space.results
    idx = np.flatnonzero(r[mn.FITS])
    if goal == "throughput":
        key = -r[mn.TOKENS_PER_S][idx]
    elif goal == "memory":
        key = r[mn.TOTAL_BYTES][idx]
    else:
        key = r[mn.TPOT_S][idx] if mn.TPOT_S in r else r[mn.STEP_S][idx]
    return idx[np.argsort(key, kind="stable")]
