"""Estimates: a validated setup in, a RunRecord(kind="estimate", source="estimated") out.

`estimate_train` and `estimate_infer` feed the array-friendly cores (trainmodel, infermodel)
with scalars and add what people need beside the numbers: the verdict (fits or not, and by
how much) and notes on every assumption that matters for this setup.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.activations import HELD_LOGITS, RECOMPUTE_LEVEL
from llmdissect.perfmodel.ceilings import Machine, with_accumulate, with_attention_kernel, with_weight_stream_scale
from llmdissect.perfmodel.config import InferSetup, TrainSetup
from llmdissect.perfmodel.infermodel import infer_memory, infer_time
from llmdissect.perfmodel.op_costs import HEADS, KERNELS, LORA_DROPOUTS, LOSSES
from llmdissect.perfmodel.trainmodel import train_memory, train_time

OFFLOAD_LEVEL = {"none": 0, "optimizer": 1, "params": 2}


@dataclass
class Estimate:
    """Per-device memory, per-step times and rates, with the reasoning behind them."""

    kind: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return bool(self.metrics[mn.FITS])

    def verdict(self) -> str:
        mem = self.metrics[mn.MEMORY]
        cap = self.metrics["device_memory_bytes"]
        gib = 2 ** 30
        if self.fits:
            return (f"fits: {mem[mn.TOTAL_BYTES] / gib:.2f} GiB of {cap / gib:.2f} GiB per device "
                    f"({(cap - mem[mn.TOTAL_BYTES]) / gib:.2f} GiB to spare)")
        over = mem[mn.TOTAL_BYTES] - cap
        host = self.metrics.get("host_fits")
        where = "device" if over > 0 else "host"
        if over <= 0 and host is False:
            return f"does not fit: host memory needs {self.metrics[mn.MEMORY]['host_total_bytes'] / gib:.2f} GiB"
        return (f"does not fit: {mem[mn.TOTAL_BYTES] / gib:.2f} GiB needed per {where}, "
                f"{cap / gib:.2f} GiB available ({over / gib:.2f} GiB over)")

    def to_record(self, env: dict[str, Any] | None = None):
        from llmdissect.results.schema import RunRecord

        metrics = dict(self.metrics)
        metrics["notes"] = list(self.notes)
        rec = RunRecord(kind=mn.ESTIMATE, source="estimated", config=self.config, env=env or {}, metrics=metrics)
        return rec.finish("ok")


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (_plain(v) if isinstance(v, dict) else (float(v) if not isinstance(v, (bool, str)) else v))
            for k, v in d.items()}


def estimate_train(setup: TrainSetup, mach: Machine) -> Estimate:
    m, e = setup.model, setup.e
    lora = 1 if setup.lora_rank else 0
    lora_params = wt.lora_params(m, setup.lora_rank, setup.lora_targets) if lora else 0
    quant = setup.quant
    if quant in wt.FP8_GEMM:
        raise UserError(f"--quant {quant} is an inference option (FP8 training is --float8 tensorwise)")
    float8_scale = _float8_scale(setup)  # refused here where the device has no FP8 peak, timed or not
    mach = with_accumulate(with_attention_kernel(mach, setup.attn), setup.accumulate)
    frozen = wt.model_weight_bytes(m, quant, e) if lora else 0
    layer_bytes = wt.layer_read_bytes(m, quant, e)
    # context parallelism: each device runs its 1 / cp of every sequence, and the cp ranks hold
    # the same weights, so ZeRO shards and gradients reduce over dp x cp of them
    kw = dict(b=setup.micro_batch, s=setup.seq // setup.cp, ga=setup.grad_accum, e=e, eager=int(setup.attn == "eager"),
              rc=RECOMPUTE_LEVEL[setup.recompute], zero=setup.zero, off=OFFLOAD_LEVEL[setup.offload],
              tp=setup.tp, pp=setup.pp, dp=setup.dp * setup.cp, optimizer=setup.optimizer, lora=lora,
              lora_params=lora_params, frozen_weight_bytes=frozen, pure=int(setup.precision == "pure"),
              ep=setup.ep, pp_virtual=setup.pp_virtual, loss=LOSSES.index(setup.loss), sp=int(setup.sp),
              head=HEADS.index(setup.head))
    targets = wt.resolve_lora_targets(m, setup.lora_targets) if lora else ()
    memory = _plain(train_memory(m, mach, flat=int(setup.flat_optimizer), held=HELD_LOGITS.index(setup.held_logits),
                                 lora_rank=setup.lora_rank, lora_targets=targets,
                                 lora_dropout=LORA_DROPOUTS.index(setup.lora_dropout), **kw))
    host_total = memory.pop("host_bytes") * setup.platform.num_devices
    memory["host_total_bytes"] = host_total
    metrics: dict[str, Any] = {mn.MEMORY: memory, "device_memory_bytes": setup.platform.device.memory_bytes,
                               "trainable_params": float(lora_params if lora else m.params),
                               "data_parallel": setup.dp}
    notes = _common_notes(mach)
    if mach.ceilings is not None:
        t = train_time(m, mach, layer_weight_bytes=layer_bytes, sharded_calls=setup.sharded_calls,
                       flat=int(setup.flat_optimizer), fsdp=int(setup.engine == "fsdp"),
                       lora_rank=setup.lora_rank, lora_targets=targets,
                       lora_dropout=LORA_DROPOUTS.index(setup.lora_dropout), cp=setup.cp,
                       pp_flushes=setup.pp_flushes, float8_scale=float8_scale,
                       kernels=KERNELS.index(setup.kernels), async_tp=int(setup.async_tp),
                       prefetch=int(setup.prefetch), **kw)
        metrics["comm_total_s"] = float(t.pop("comm_total_s"))
        metrics.update(_plain(t))
    else:
        metrics.update({mn.TIME: None, mn.TOKENS_PER_S: None, mn.MFU: None})
        from llmdissect.perfmodel import flops as fl
        metrics[mn.MODEL_FLOPS_PER_TOKEN] = float(fl.model_flops_per_token(m, setup.seq, lora_params))
    if setup.cp > 1:
        notes.append(f"--cp {setup.cp}: each device holds {setup.seq // setup.cp} tokens of every sequence; the "
                     "attention's keys and values pass around a ring of the cp ranks behind its compute (what "
                     "outlasts it shows in comm_s); ZeRO shards and gradients span dp x cp ranks")
    if setup.sp:
        notes.append(f"--sp: norms and residual adds on 1/{setup.tp} of the tokens, their saved tensors split too; "
                     "each TP all-reduce an all-gather and a reduce-scatter"
                     + (" overlapped with the layers' products (--async-tp: what outlasts them shows in comm_s)"
                        if setup.async_tp else ""))
    if setup.prefetch:
        notes.append("--prefetch: ZeRO-3's parameter all-gathers hide behind the step's compute but the first "
                     "unit's of each pass (what outlasts the compute shows in comm_s)")
    fits = memory[mn.TOTAL_BYTES] <= setup.platform.device.memory_bytes
    host_cap = setup.platform.host_memory_bytes
    if setup.offload != "none":
        metrics["host_fits"] = None if host_cap is None else host_total <= host_cap
        fits = fits and metrics["host_fits"] is not False
        notes.append(f"offload: {host_total / 2**30:.1f} GiB of optimizer states"
                     f"{' and parameters' if setup.offload == 'params' else ''} in host memory "
                     f"({'unknown host size' if host_cap is None else f'{host_cap / 2**30:.0f} GiB available'})")
    metrics[mn.FITS] = bool(fits)
    notes.append("memory.total_bytes = params + optimizer + step_peak (activations and gradients as they meet in "
                 "backward) + other (framework allowance)")
    if m.is_moe:
        shared = ", shared" if m.num_shared_experts else ""
        notes.append(f"MoE: FLOPs and MFU on the {m.params_active / 1e9:.2f}B active parameters (router, top-"
                     f"{m.experts_per_token} of {m.num_experts} experts{shared}), memory on all {m.params / 1e9:.2f}B"
                     + (f"; --ep {setup.ep}: 1/{setup.ep} of the routed experts per device, 4 all-to-alls per MoE "
                        "layer and micro-batch, uniform routing" if setup.ep > 1 else ""))
    if quant != "none":
        notes.append(f"QLoRA: base weights stored as {quant}, dequantized to {setup.dtype} before each matmul "
                     "(the copy's traffic is counted; kernel-launch overheads are not)")
    return Estimate(setup.kind, setup.config(), metrics, notes)


def _fp8_peak_ratio(setup: TrainSetup | InferSetup, option: str) -> float:
    """The device's FP8 peak over its compute dtype's; UserError naming `option` where it has none."""
    dev = setup.platform.device
    fp8, base = dev.peak("fp8"), dev.peak(setup.dtype)
    if not fp8 or not base:
        raise UserError(f"{option} needs a device with an FP8 peak; {dev.name} has none")
    return fp8 / base


def _float8_scale(setup: TrainSetup) -> float:
    """The FP8 peak over the compute dtype's where the linears train in float8, else 1."""
    return 1.0 if setup.float8 == "none" else _fp8_peak_ratio(setup, f"--float8 {setup.float8}")


def _fp8_machine(setup: InferSetup, mach: Machine) -> Machine:
    """`mach` with its GEMMs at the device's FP8 peak (weights.FP8_GEMM); UserError where the
    device has none."""
    from dataclasses import replace

    ratio = _fp8_peak_ratio(setup, f"--quant {setup.quant}")
    if mach.ceilings is None:
        return mach
    return replace(mach, ceilings=replace(mach.ceilings, gemm_peak_scale=ratio))


def estimate_infer(setup: InferSetup, mach: Machine) -> Estimate:
    m, e = setup.model, setup.e
    if setup.quant in wt.FP8_GEMM:
        mach = _fp8_machine(setup, mach)
    mach = with_weight_stream_scale(mach, wt.weight_stream_scale(setup.quant, setup.platform.device.kind))
    mach = with_accumulate(with_attention_kernel(mach, setup.attn), setup.accumulate)
    kw = dict(b=setup.batch, n_in=setup.input_len, n_out=setup.output_len, e=e,
              eager=int(setup.attn == "eager"), tp=setup.tp, kv_e=setup.kv_e, pp=setup.pp)
    group = setup.group_size
    dev = setup.platform.device
    memory, max_batch = infer_memory(m, mach, weight_bytes=wt.model_weight_bytes(m, setup.quant, e, group), **kw)
    kw["concat"] = int(setup.cache == "dynamic")  # time only: both caches hold the same bytes at the end
    memory = _plain(memory)
    metrics: dict[str, Any] = {mn.MEMORY: memory, "device_memory_bytes": setup.platform.device.memory_bytes,
                               "max_batch": int(max_batch), "data_parallel": setup.dp}
    notes = _common_notes(mach)
    if mach.ceilings is not None:
        layer_weights = wt.layer_read_bytes(m, setup.quant, e, group)
        decode = _decode_read_bytes(setup, setup.batch)
        metrics.update(_plain(infer_time(m, mach, dp=setup.dp, layer_weights=layer_weights, decode_weights=decode,
                                         **kw)))
        if decode != layer_weights:
            notes.append(f"nf4 at batch 1: decode runs bitsandbytes' 4-bit kernel, "
                         f"{wt.NF4_GEMV_SPEEDUP[dev.architecture.lower()]:g}x a 16-bit product on "
                         f"{dev.architecture} (its release notes); prefill and larger batches dequantize each "
                         "weight first")
        metrics["batch_sweep"] = _batch_sweep(setup, mach, kw, layer_weights, int(max_batch))
    else:
        metrics.update({mn.TIME: None, mn.TOKENS_PER_S: None, mn.MFU: None})
    metrics[mn.FITS] = memory[mn.TOTAL_BYTES] <= setup.platform.device.memory_bytes
    notes.append(f"KV cache holds {setup.input_len + setup.output_len - 1} positions; decode costed at the mean "
                 f"context {setup.input_len + setup.output_len / 2:g}; up to {int(max_batch)} sequences fit")
    return Estimate(mn.INFER, setup.config(), metrics, notes)


def _decode_read_bytes(setup: InferSetup, batch: int):
    """What a decode step of `batch` sequences reads for a layer's weights on this device
    (weights.decode_layer_read_bytes)."""
    dev = setup.platform.device
    return wt.decode_layer_read_bytes(setup.model, setup.quant, setup.e, setup.group_size, dev.architecture, batch,
                                      dev.kind)


def _batch_sweep(setup: InferSetup, mach: Machine, kw: dict, layer_weights: int, max_batch: int) -> list[dict]:
    """TTFT, TPOT and throughput at batch 1, 2, 4, ... up to the KV-cache capacity."""
    batches = [1 << i for i in range(max(max_batch, 1).bit_length()) if 1 << i <= max_batch]
    if max_batch > 0 and (not batches or batches[-1] != max_batch):
        batches.append(max_batch)
    rows = []
    for b in batches:
        t = infer_time(setup.model, mach, dp=setup.dp, layer_weights=layer_weights,
                       decode_weights=_decode_read_bytes(setup, b),
                       **{**kw, "b": b})
        rows.append({"batch": b, mn.TTFT_S: float(t[mn.TIME][mn.TTFT_S]), mn.TPOT_S: float(t[mn.TIME][mn.TPOT_S]),
                     mn.TOKENS_PER_S: float(t[mn.TOKENS_PER_S])})
    return rows


def _common_notes(mach: Machine) -> list[str]:
    a = mach.assumptions
    notes = [f"efficiency from {mach.sources['efficiency']}: "
             + ", ".join(f"{k} {v:.2f}" for k, v in sorted(mach.efficiency.items())),
             f"peaks from {mach.sources['peak']}; collectives from {mach.sources['collectives']}",
             "assumptions{}: framework allowance {:.2f} GiB + {:.0%} of tensors (memory.other_bytes), "
             "data-parallel comm {:.0%} hidden behind backward, CPU Adam {:.3g} params/s".format(
                 " (calibration profile)" if "assumptions" in mach.sources else "",
                 a["framework_context_bytes"] / 2**30, a["fragmentation_fraction"], a["overlap_fraction"],
                 a["cpu_adam_params_per_s"])]
    if mach.ceilings is None:
        notes.append("no time estimate: this device's peaks are unknown (run `llmdissect peak` to measure them)")
    return notes
