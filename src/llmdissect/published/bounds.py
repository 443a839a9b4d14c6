"""What a published inference number asks of the device's memory bandwidth.

Each decode step reads every weight it uses at least once: a layer's weights (tens to
hundreds of MB a device) do not stay in on-chip caches from one step to the next (an A100's
L2 holds 40 MB, an H100's 50 MB), so a step lasts at least

    floor = bytes its products read a device / the device's peak memory bandwidth,

the bytes being the model's weights (quantized as the point says; an untied input embedding
left out, of which a step reads b rows) over the tensor-parallel ranks, times the share a
step of b tokens reaches (all of a dense model; for a mixture of experts the experts no
token of the batch was routed to are skipped, uniform routing: moe.decode_weight_fraction).
A published throughput or per-token latency implies a step time;
`bandwidth_share` is floor / that time. Above 1 the row cannot have run as its estimate
options say: something the options do not express (here, usually, fewer experts reached than
uniform routing reaches) made it faster than the hardware's peak allows, and the point is
kept, but not as exactly expressed (tests/unit/test_published_bounds.py holds every exact
point at or below 1). The prefill, the KV cache and every other cost are left out, so the
floor is the loosest one; no torch.
"""
from __future__ import annotations

from typing import Optional

from llmdissect.published.points import PublishedPoint

DECODE_METRICS = ("tokens_per_s", "decode_tokens_per_s", "tpot_s")


def implied_step_s(point: PublishedPoint, batch: int, replicas: int) -> float:
    """The decode step time a published number implies: a step makes `batch` tokens on each
    replica; tokens/s counts them over the whole run (prefill inside it, so a step is shorter
    still)."""
    if point.metric == "tpot_s":
        return point.value
    return (1 if point.metric == "decode_tokens_per_s" else replicas) * batch / point.value


def bandwidth_share(point: PublishedPoint, model=None) -> Optional[float]:
    """The share of the device's peak memory bandwidth the point's decode steps need for their
    weights alone (see the module docstring); None for points this does not bound (not
    inference, no estimate, another metric, or a device without a catalogued bandwidth)."""
    from llmdissect.dtypes import dtype_bytes
    from llmdissect.perfmodel import moe
    from llmdissect.perfmodel import weights as wt
    from llmdissect.specs import get_model
    from llmdissect.specs.hardware import resolve_platform

    options = point.estimate or {}
    if options.get("kind") != "infer" or point.metric not in DECODE_METRICS:
        return None
    m = model or get_model(options["model"])
    tp, pp = int(options.get("tp", 1)), int(options.get("pp", 1))
    batch = int(options.get("batch", 1))
    platform = resolve_platform(options["hardware"], options.get("gpus"))
    bandwidth = platform.device.memory_bandwidth_bytes_per_s
    if not bandwidth:
        return None
    group = int(options.get("group_size") or wt.INT4_GROUP)
    e = dtype_bytes(options.get("dtype") or "bf16")
    weights = wt.model_weight_bytes(m, options.get("quant", "none"), e, group) \
        - (not m.tie_word_embeddings) * m.params_embedding * e
    # a pipeline's stages run one batch in turn: a step still reads every stage's share once
    floor_s = weights * float(moe.decode_weight_fraction(m, batch)) / tp / bandwidth
    replicas = max(1, int(options.get("gpus") or tp * pp) // (tp * pp))
    return floor_s / implied_step_s(point, batch, replicas)
