"""published.bounds: the share of the peak memory bandwidth a published decode number needs
for its weights alone, in closed form, and held over the shipped set."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import moe
from llmdissect.published.bounds import bandwidth_share
from llmdissect.published.check import _model
from llmdissect.published.points import PublishedPoint, load_points
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform


def _point(metric: str, value: float, **estimate) -> PublishedPoint:
    return PublishedPoint(id="t", category="infer", source="https://example.org", where="-", quote="-", model="-",
                          hardware="-", config="-", metric=metric, unit="-", value=value,
                          estimate={"kind": "infer", "dtype": "fp16", **estimate})


def test_a_dense_decode_needs_its_weights_each_step():
    m = get_model("llama2-7b")
    bandwidth = resolve_platform("a100").device.memory_bandwidth_bytes_per_s
    floor_s = (m.params - m.params_embedding) * 2 / bandwidth  # every fp16 weight once a step, the lookup's aside
    point = _point("decode_tokens_per_s", 50.0, model="llama2-7b", hardware="a100", batch=1)
    assert bandwidth_share(point) == pytest.approx(floor_s * 50.0, rel=1e-9)
    # tokens/s: batch x output over the run; two replicas of TP 2 on 4 GPUs share the tokens
    point = _point("tokens_per_s", 4000.0, model="llama2-7b", hardware="8xa100", gpus=4, tp=2, batch=64,
                   output_len=128)
    assert bandwidth_share(point) == pytest.approx(floor_s / 2 / (2 * 64 / 4000.0), rel=1e-9)
    assert bandwidth_share(_point("ttft_s", 0.1, model="llama2-7b", hardware="a100")) is None


def test_a_mixture_of_experts_step_reads_the_experts_its_batch_reaches():
    m = get_model("mixtral-8x7b")
    one = bandwidth_share(_point("tpot_s", 0.02, model="mixtral-8x7b", hardware="8xa100", gpus=2, tp=2, batch=1))
    many = bandwidth_share(_point("tpot_s", 0.02, model="mixtral-8x7b", hardware="8xa100", gpus=2, tp=2, batch=32))
    assert many / one == pytest.approx(float(moe.decode_weight_fraction(m, 32) / moe.decode_weight_fraction(m, 1)))


def test_no_exactly_expressed_point_needs_more_than_the_peak_bandwidth():
    beyond = []
    for p in load_points("infer"):
        if p.estimate is None:
            continue
        share = bandwidth_share(p, _model(p, p.estimate["model"]))
        if share is not None and share > 1:
            beyond.append(p)
    assert all(p.missing for p in beyond), [p.id for p in beyond if not p.missing]
    # TensorRT-LLM v0.9.0's Mixtral row on two A100s: 1.14x the peak under uniform routing (kept, approximate)
    assert [p.id for p in beyond] == ["trtllm090-mixtral-8x7b-fp16-a100-tp2-bs32-2048-2048"]
