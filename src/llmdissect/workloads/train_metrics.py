"""Training throughput, FLOPs and utilisation exactly as docs/metrics.md ("Training") defines them."""
from __future__ import annotations

from typing import Any

from llmdissect.specs.models import ModelSpec


def flops_per_token(spec: ModelSpec, seq: int, method: str, lora_rank: int, lora_targets: list[str],
                    recompute: str) -> tuple[int, int]:
    """(model, hardware) FLOPs per token, from the analytical model's one definition
    (perfmodel.flops: PaLM's 6 N + 12 L d_attn s; 4 N + 6 N_lora for LoRA/QLoRA; plus the
    recomputed forward for hardware FLOPs)."""
    from llmdissect.perfmodel.activations import RECOMPUTE_LEVEL
    from llmdissect.perfmodel.flops import hardware_flops_per_token, model_flops_per_token
    from llmdissect.perfmodel.weights import lora_params

    adapters = lora_params(spec, lora_rank, tuple(lora_targets)) if method != "full" else 0
    model = model_flops_per_token(spec, seq, adapters)
    return int(model), int(hardware_flops_per_token(spec, seq, RECOMPUTE_LEVEL[recompute], adapters))


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
