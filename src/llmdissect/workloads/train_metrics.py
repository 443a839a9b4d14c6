"""Training throughput, FLOPs and utilisation exactly as docs/metrics.md ("Training") defines them."""
from __future__ import annotations

from typing import Any

from llmdissect.specs.models import ModelSpec


def lora_params(spec: ModelSpec, rank: int, targets: list[str]) -> int:
    """Adapter parameters: r x (in + out) for each targeted projection of every layer."""
    h, q, kv, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    shapes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
              "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}
    return spec.num_layers * sum(rank * sum(shapes[t]) for t in targets)


def attention_flops_per_token(spec: ModelSpec, seq: int) -> int:
    """12 L d_attn s: scores and attention x V, forward (4 L d_attn s) and backward (2x), the
    full (non-causal) score matrix as PaLM (arXiv 2204.02311, app. B) and Megatron count it."""
    return 12 * spec.num_layers * spec.q_dim * seq


def model_flops_per_token(spec: ModelSpec, seq: int, method: str = "full", lora_rank: int = 0,
                          lora_targets: list[str] | None = None) -> int:
    """PaLM model FLOPs per token: 6 N + 12 L d_attn s (N = params_matmul). LoRA/QLoRA: the
    frozen weights cost 4 N (forward 2 N, input gradients 2 N, no weight gradients) and the
    adapters 6 N_lora."""
    n = spec.params_matmul
    attention = attention_flops_per_token(spec, seq)
    if method == "full":
        return 6 * n + attention
    return 4 * n + 6 * lora_params(spec, lora_rank, lora_targets or []) + attention


def recompute_flops_per_token(spec: ModelSpec, seq: int, recompute: str, method: str = "full",
                              lora_rank: int = 0, lora_targets: list[str] | None = None) -> int:
    """The forward FLOPs done again in backward. Full: one whole forward (2 N + 4 L d_attn s,
    so that HFU counts 8 N + 16 L d_attn s for full training). Selective (attention blocks):
    the attention projections' forward plus the attention core's."""
    if recompute == "none":
        return 0
    adapters = 2 * lora_params(spec, lora_rank, lora_targets or []) if method != "full" else 0
    attention_fwd = 4 * spec.num_layers * spec.q_dim * seq
    if recompute == "full":
        return 2 * spec.params_matmul + adapters + attention_fwd
    return 2 * spec.num_layers * spec.params_attention_per_layer + attention_fwd


def utilisation(tokens_per_s: float, flops_per_token: float, peak_flops_per_s: float | None,
                devices: int) -> float | None:
    """tokens/s x FLOPs/token / (peak x devices); None when the peak is unknown."""
    if not peak_flops_per_s:
        return None
    return tokens_per_s * flops_per_token / (peak_flops_per_s * devices)


def device_peak(device_type: str, dtype: str) -> tuple[float | None, str]:
    """The dense peak of the compute dtype and where it came from."""
    if device_type == "cpu":
        from llmdissect.specs.hardware import local_cpu

        cpu = local_cpu()
        peak = cpu.peak(dtype)
        return peak, "measured by `llmdissect peak`" if peak else "CPU peak not measured (run `llmdissect peak`)"
    import torch

    from llmdissect.specs.hardware import match_gpu

    name = torch.cuda.get_device_name()
    spec = match_gpu(name)
    if spec is None:
        return None, f"{name} is not catalogued"
    return spec.peak("tf32" if dtype == "fp32" and torch.backends.cuda.matmul.allow_tf32 else dtype), spec.source_url


def check_mfu(value: float | None, what: str) -> dict[str, Any]:
    """MFU above 1 is a bug and is reported as one, not hidden."""
    if value is not None and value > 1:
        return {f"{what}_error": f"{what} {value:.3f} exceeds 1: the FLOP count or the peak is wrong"}
    return {}
