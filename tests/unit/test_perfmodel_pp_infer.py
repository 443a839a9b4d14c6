"""`estimate infer --pp P`: the layers split over P devices, one batch passing through them in
turn: each device holds 1/P of the weights and cache, the latency is one device's compute
plus P - 1 sends of the hidden states a step, and the throughput per device falls by P."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import comm
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.request import build_estimate
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform

OPTIONS = dict(model="llama2-70b", hardware="8xa100", gpus=4, tp=2, batch=8, input_len=512, output_len=128)


def _infer(**kw):
    return build_estimate("infer", dict(OPTIONS, **kw))


def test_stages_split_the_weights_and_cache():
    one, two = _infer(), _infer(pp=2)
    for key in ("params_bytes", "kv_cache_bytes"):
        assert two.metrics["memory"][key] == pytest.approx(one.metrics["memory"][key] / 2)
    assert two.config["pp"] == 2 and "pp" not in one.config


def test_latency_is_one_devices_plus_the_sends():
    one, two = _infer(), _infer(pp=2)
    m, e, b = get_model("llama2-70b"), 2, 8
    mach = machine_for(resolve_platform("8xa100", 4), "bf16")
    link = comm.pipeline_network(mach.network, mach.scale_out, mach.node_devices, 2, 2)
    hop_prefill = comm.p2p_time_s(link, b * 512 * m.hidden_size * e)
    hop_step = comm.p2p_time_s(link, b * m.hidden_size * e)
    t1, t2 = one.metrics["time"], two.metrics["time"]
    assert t2["ttft_s"] - t1["ttft_s"] == pytest.approx(hop_prefill, rel=1e-6)
    assert t2["tpot_s"] - t1["tpot_s"] == pytest.approx(hop_step, rel=1e-6)
    # half the data-parallel replicas on the same devices: half the throughput
    assert two.metrics["tokens_per_s"] == pytest.approx(one.metrics["tokens_per_s"] / 2, rel=0.01)
    assert two.metrics["mfu"] == pytest.approx(one.metrics["mfu"] / 2, rel=0.01)


def test_pp_must_divide_the_devices_and_serve_refuses_it():
    with pytest.raises(UserError, match="does not divide"):
        _infer(pp=3)
    with pytest.raises(UserError, match="--pp"):
        build_estimate("serve", dict(model="llama2-7b", hardware="h100", pp=2))
