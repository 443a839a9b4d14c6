"""Offline-inference numbers from timed generate calls (docs/metrics.md, "Inference").

Pure functions, no torch: the child measures marks, these turn them into metrics, and
say what the hardware allows next to what was achieved (gpt-fast's "bandwidth achieved").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.measure.stats import Stats
from llmdissect.perfmodel.kvcache import kv_cache_bytes
from llmdissect.specs.models import ModelSpec

CONSISTENCY_TOLERANCE = 0.10


@dataclass(frozen=True)
class CallTiming:
    """One generate call, in seconds from submitting it: each output token's arrival
    (`token_s[0]` is the first token) and the call's return (the caller has every token)."""

    token_s: list[float]
    return_s: float

    @property
    def ttft_s(self) -> float:
        return self.token_s[0]

    @property
    def gaps_s(self) -> list[float]:
        """The decode steps: time between successive output tokens."""
        return [b - a for a, b in zip(self.token_s, self.token_s[1:])]


def kv_cache_bytes_formula(spec: ModelSpec, batch: int, length: int, bytes_per_value: float) -> int:
    """2 (keys and values) x layers x batch x length x kv_heads x head_dim x bytes; MLA and
    sliding-window layers as perfmodel.kvcache counts them (as transformers caches them)."""
    return int(kv_cache_bytes(spec, batch, length, bytes_per_value))


def prefill_flops(spec: ModelSpec, batch: int, input_len: int) -> float:
    """Model FLOPs of one prefill, the forward third of the PaLM count (docs/metrics.md):
    2 N_body per prompt token + 4 L d_attn s per prompt token (full score matrix), and the
    output head (2 N_head) for the last position only, since generate keeps one logit row."""
    n_body = spec.params_matmul - spec.params_head
    attn = 4 * spec.num_layers * spec.q_dim * input_len
    return float(batch * input_len * (2 * n_body + attn) + batch * 2 * spec.params_head)


def decode_kv_positions_read(input_len: int, output_len: int, static_len: int | None) -> float:
    """Cache positions one decode step reads, on average. Step k (k = 1..out-1) attends over
    input_len + k positions with a dynamic cache (mean: input_len + out/2); with a static
    cache the attention kernel reads the whole allocated buffer (`static_len`) every step."""
    if static_len:
        return float(static_len)
    return input_len + output_len / 2


def _stat(values: list[float]) -> dict[str, Any]:
    return Stats.of(values).to_dict()


def summarise(calls: list[CallTiming], *, batch: int, input_len: int, output_len: int) -> dict[str, Any]:
    """The Inference metrics of `calls` (timed, warm-up excluded), Stats over the calls.

    - ttft_s: submit -> first output token; e2e_latency_s: submit -> return (all tokens).
    - tpot_s: (e2e - ttft) / (output_len - 1) per call; absent for output_len 1.
    - prefill_tokens_per_s: batch x input_len / ttft.
    - decode_tokens_per_s: batch x (output_len - 1) / (last token - first token).
    - decode_step_s: every gap between successive tokens of every call.
    - consistency: median ttft + (output_len - 1) x median decode step vs median e2e.
    """
    m: dict[str, Any] = {
        mn.TTFT_S: _stat([c.ttft_s for c in calls]),
        mn.E2E_LATENCY_S: _stat([c.return_s for c in calls]),
        mn.PREFILL_TOKENS_PER_S: _stat([batch * input_len / c.ttft_s for c in calls]),
        "output_tokens": output_len,
        "output_tokens_counted_by": "generated token ids (EOS ignored: min_new_tokens = max_new_tokens)",
    }
    if output_len > 1:
        m[mn.TPOT_S] = _stat([(c.return_s - c.ttft_s) / (output_len - 1) for c in calls])
        m[mn.DECODE_TOKENS_PER_S] = _stat([batch * (output_len - 1) / (c.token_s[-1] - c.token_s[0]) for c in calls])
        gaps = [g for c in calls for g in c.gaps_s]
        m["decode_step_s"] = _stat(gaps)
        predicted = m[mn.TTFT_S]["median"] + (output_len - 1) * m["decode_step_s"]["median"]
        e2e = m[mn.E2E_LATENCY_S]["median"]
        error = abs(predicted - e2e) / e2e
        m["consistency"] = {"predicted_e2e_s": predicted, "e2e_s": e2e, "relative_error": error,
                            "tolerance": CONSISTENCY_TOLERANCE, "ok": error <= CONSISTENCY_TOLERANCE}
    return m


def hardware_allows(*, weights_read_bytes: int, kv_bytes_per_position: float, kv_positions_read: float,
                    decode_step_s: float | None, prefill_flops_value: float, ttft_s: float,
                    memory_bandwidth_bytes_per_s: float | None, peak_flops_per_s: float | None,
                    source: str) -> dict[str, Any]:
    """Achieved vs ceiling. Decode: bytes read per step (weights + KV cache) / median step
    time, against memory bandwidth. Prefill: prefill FLOPs / median TTFT, against peak.
    A ceiling that was not measured or catalogued is None ("not measured")."""
    out: dict[str, Any] = {"ceilings_source": source, "memory_bandwidth_bytes_per_s": memory_bandwidth_bytes_per_s,
                           "peak_flops_per_s": peak_flops_per_s, "prefill_flops": prefill_flops_value,
                           "prefill_flops_per_s": prefill_flops_value / ttft_s}
    out["prefill_peak_fraction"] = out["prefill_flops_per_s"] / peak_flops_per_s if peak_flops_per_s else None
    if decode_step_s:
        step_bytes = weights_read_bytes + kv_bytes_per_position * kv_positions_read
        out["decode_bytes_per_step"] = step_bytes
        out["decode_bandwidth_bytes_per_s"] = step_bytes / decode_step_s
        out["decode_bandwidth_fraction"] = (out["decode_bandwidth_bytes_per_s"] / memory_bandwidth_bytes_per_s
                                            if memory_bandwidth_bytes_per_s else None)
    return out


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower().replace("nvidia", "").replace("geforce", "") if ch.isalnum())


def ceilings(device: str, device_name: str, dtype: str,
             profile: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """(memory bandwidth, peak FLOP/s of `dtype`, where they come from) for the device that
    ran: this CPU's measured peaks (calibration profile); a GPU's measured entry in the
    profile, else the catalogued device matched by name; else (None, None, "not measured")."""
    from llmdissect.specs.hardware import list_hardware, local_cpu

    if not str(device).startswith("cuda"):
        cpu = local_cpu(profile or None)
        if cpu.measured or cpu.memory_bandwidth_bytes_per_s:
            return cpu.memory_bandwidth_bytes_per_s, cpu.peak(dtype), "measured on this machine (calibration profile)"
        return None, None, "not measured (run `llmdissect peak`)"
    gpu = (profile.get("gpus") or {}).get(device_name)
    if gpu:
        return (gpu.get("memory_bandwidth_bytes_per_s"), (gpu.get("peak_flops_per_s") or {}).get(dtype),
                f"measured on this machine ({device_name})")
    name = _norm(device_name)
    for spec in list_hardware():
        keys = [_norm(k) for k in (spec.name, *spec.aliases)]
        if any(k and k in name for k in keys):
            return spec.memory_bandwidth_bytes_per_s, spec.peak(dtype), f"catalogue: {spec.name} ({spec.source_url})"
    return None, None, f"not measured ({device_name} is not catalogued)"
