"""Offline inference, one grid point: the child side of `llmdissect bench infer`.

`run(config)` reads the point (an `InferPoint`'s JSON dict), builds the model (random
weights from the spec, or a local folder's weights), quantizes it, and times
`model.generate` with a fixed output length (EOS ignored) on random prompt ids drawn from
a fixed seed. One timer marks the submit, every
output token (through a streamer, which generate calls once per step) and the return;
`measure_loop` repeats the call (warm-up apart, the first call reported on its own).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.workloads.infer_config import InferPoint
from llmdissect.workloads.infer_metrics import (
    CallTiming,
    ceilings,
    decode_kv_positions_read,
    hardware_allows,
    prefill_flops,
    summarise,
)


class TokenClock:
    """A generate streamer that marks the arrival of every output token with `timer`.
    generate first puts the prompt (ignored), then each step's new tokens."""

    def __init__(self, timer: Any):
        self.timer = timer
        self.calls: list[tuple[Any, list[Any]]] = []
        self._prompt_seen = False

    def begin(self) -> None:
        self.calls.append((self.timer.now(), []))
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.calls[-1][1].append(self.timer.now())

    def end(self) -> None:
        pass


def load_model(point: InferPoint, spec: Any) -> tuple[Any, str]:
    """The model and where its weights came from: a local folder with safetensors, else
    random weights from the spec (modeling.build_model, seeded)."""
    from llmdissect.modeling import build_model, check_attn

    folder = Path(point.model)
    if folder.is_dir() and any(folder.glob("*.safetensors")):
        from transformers import AutoModelForCausalLM

        from llmdissect.dtypes import torch_dtype

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(point.dtype),
                                                     attn_implementation=check_attn(point.attn, point.device))
        return model.to(point.device), f"local folder {folder}"
    return build_model(spec, dtype=point.dtype, attn=point.attn, device=point.device,
                       seed=point.seed), "random (seeded)"


def cache_tensor_bytes(cache: Any) -> tuple[int, int | None]:
    """Bytes of the key/value tensors the cache actually holds (each storage once), and the
    allocated length of a static cache (None for a dynamic one)."""
    seen: dict[int, int] = {}
    static_len = None
    for layer in getattr(cache, "layers", []):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None and t.numel():
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        if type(layer).__name__.startswith("Static"):
            static_len = int(layer.keys.shape[-2])
    return sum(seen.values()), static_len


def unreached_expert_bytes(model: Any, spec: Any, batch: int) -> float:
    """Routed-expert weight bytes a decode step of `batch` tokens is not expected to read:
    each MoE layer's experts beyond the expected distinct ones its tokens reach under
    uniform routing (perfmodel.moe.expected_distinct_experts). 0 for a dense model."""
    if not spec.is_moe:
        return 0.0
    from llmdissect.perfmodel.moe import expected_distinct_experts

    routed = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if ".experts." in n)
    reached = expected_distinct_experts(spec.num_experts, spec.experts_per_token, batch)
    return routed * (1 - reached / spec.num_experts)


def _generate_kwargs(point: InferPoint, clock: TokenClock) -> dict[str, Any]:
    out = point.output_len
    kw: dict[str, Any] = dict(max_new_tokens=out, min_new_tokens=out, do_sample=False, streamer=clock,
                              return_dict_in_generate=True, pad_token_id=0)
    if point.cache == "static":
        kw["cache_implementation"] = "static"
    return kw


def run(config: dict[str, Any]) -> dict[str, Any]:
    import torch

    from llmdissect.calibration_profile import load_profile
    from llmdissect.config import parse_config
    from llmdissect.dtypes import dtype_bytes
    from llmdissect.measure import LoopPolicy, Timer, measure_loop, memory
    from llmdissect.measure.energy import EnergyMeter, energy_metrics
    from llmdissect.measure.env import capture_device_env
    from llmdissect.specs import get_model
    from llmdissect.techniques.quantization import apply_quantization, weight_bytes, weight_bytes_read_per_step

    point = parse_config(InferPoint, **config)
    device = point.device
    batch, input_len, output_len = point.batch, point.input_len, point.output_len
    spec = get_model(point.model)
    t0 = time.perf_counter()
    model, weights_source = load_model(point, spec)
    model.eval()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    apply_quantization(model, point.quant, dtype=point.dtype, device=device, group_size=point.group_size)
    quantize_s = time.perf_counter() - t0
    model.generation_config.disable_compile = True  # compilation is --compile's, never implicit
    if point.compile:
        model.forward = torch.compile(model.forward)

    gen = torch.Generator().manual_seed(point.seed)
    ids = torch.randint(0, spec.vocab_size, (batch, input_len), generator=gen).to(device)  # [batch, input_len]
    mask = torch.ones_like(ids)
    timer = Timer(device)
    clock = TokenClock(timer)
    kwargs = _generate_kwargs(point, clock)
    last: dict[str, Any] = {}

    def call() -> None:
        clock.begin()
        last["out"] = model.generate(ids, attention_mask=mask, **kwargs)

    if device.startswith("cuda"):
        memory.cuda_reset_peak()
    warmup, repeats = point.warmup, point.repeats
    meter = EnergyMeter()  # over the timed calls only (measure_loop starts it after the warm-up)
    with torch.inference_mode():
        loop = measure_loop(call, LoopPolicy(warmup=warmup, min_iters=repeats, max_iters=repeats), timer,
                            on_timed_start=meter.start)
    joules = meter.stop()
    produced = last["out"].sequences.shape[1] - input_len
    if produced != output_len:
        raise RuntimeError(f"generate produced {produced} tokens, expected {output_len} (EOS must be ignored)")
    calls = []
    for (submit, marks), e2e in zip(clock.calls[warmup:], loop.samples):
        if len(marks) != output_len:
            raise RuntimeError(f"streamer saw {len(marks)} tokens per call, expected {output_len}")
        calls.append(CallTiming([timer.elapsed_s(submit, m) for m in marks], e2e))
    metrics = summarise(calls, batch=batch, input_len=input_len, output_len=output_len)
    metrics.update(energy_metrics(meter, joules, batch * output_len * len(calls), mn.ENERGY_J_PER_OUTPUT_TOKEN))
    first = clock.calls[0] if warmup else None
    metrics["first_call_s"] = loop.first_call_s
    metrics["first_call_ttft_s"] = timer.elapsed_s(first[0], first[1][0]) if first and first[1] else None
    metrics["build_s"], metrics["quantize_s"] = build_s, quantize_s

    cache = getattr(last["out"], "cache", None)
    if cache is None:  # transformers < 5 names it past_key_values
        cache = getattr(last["out"], "past_key_values", None)
    kv_bytes, static_len = cache_tensor_bytes(cache)
    cache_len = static_len or (input_len + output_len - 1)  # the last token is never fed back
    metrics.update(kv_cache_bytes=kv_bytes, kv_cache_positions=cache_len,
                   weights_bytes=weight_bytes(model),
                   weights_bytes_read_per_step=weight_bytes_read_per_step(model) - unreached_expert_bytes(model, spec,
                                                                                                           batch))
    del last["out"], cache

    if device.startswith("cuda"):
        metrics.update(memory.cuda_peaks())
        metrics["peak_memory_scope"] = "torch.cuda.max_memory_allocated over warm-up and timed calls"
    else:
        metrics.update(_cpu_peak(call, metrics["weights_bytes"]))
    metrics[mn.PEAK_RSS_BYTES] = memory.peak_rss_bytes()

    mem_bw, peak, source = ceilings(device, point.hardware, point.dtype, load_profile())
    kv_per_position = kv_bytes / cache_len if cache_len else 0.0
    step = (metrics.get("decode_step_s") or {}).get("median")
    metrics["hardware_allows"] = hardware_allows(
        weights_read_bytes=metrics["weights_bytes_read_per_step"], kv_bytes_per_position=kv_per_position,
        kv_positions_read=decode_kv_positions_read(input_len, output_len, static_len), decode_step_s=step,
        prefill_flops_value=prefill_flops(spec, batch, input_len), ttft_s=metrics[mn.TTFT_S]["median"],
        memory_bandwidth_bytes_per_s=mem_bw, peak_flops_per_s=peak, source=source)
    metrics["weights_source"] = weights_source
    metrics["kv_bytes_per_value"] = dtype_bytes(point.dtype)
    return {"metrics": metrics, "env": capture_device_env()}


def _cpu_peak(call: Any, weights: int) -> dict[str, Any]:
    """One extra, untimed call under the live-tensor tracker: weights + the peak of tensors
    alive during generate (activations, KV cache, logits)."""
    import torch

    from llmdissect.measure.memory import live_tensor_tracker

    try:
        with torch.inference_mode(), live_tensor_tracker() as tracker:
            call()
        return {mn.PEAK_MEMORY_BYTES: weights + tracker.peak_bytes, "peak_generate_tensor_bytes": tracker.peak_bytes,
                "peak_memory_scope": "weights + peak of live tensors during one untimed generate call"}
    except Exception as e:  # the tracker cannot see through every tensor subclass
        return {mn.PEAK_MEMORY_BYTES: None, "peak_memory_scope": f"not measured: tracker failed ({type(e).__name__})"}
