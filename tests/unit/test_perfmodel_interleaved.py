"""Megatron-LM's interleaved 1F1B (`--pp-virtual V`): the bubble is (p - 1) / V micro-batches
and the pipeline sends V times as many (Narayanan et al., arXiv 2104.04473, sec. 2.2.2); the first
stage holds L (1 + (p - 1) / (p V)) layers' activations (Korthikanti et al., arXiv 2205.05198,
sec. 4.2.3). No torch."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import activations, comm
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import TrainSetup
from llmdissect.perfmodel.estimate import estimate_train
from llmdissect.perfmodel.request import estimate_request
from llmdissect.specs import get_model, resolve_platform


@pytest.mark.parametrize("pp, v, want", [(4, 1, 3.0), (4, 2, 1.5), (8, 5, 1.4), (1, 1, 0.0)])
def test_bubble_in_micro_batches_is_p_minus_1_over_v(pp, v, want):
    assert comm.interleaved_bubble_micro_batches(pp, v) == pytest.approx(want)


def test_first_stage_holds_the_warm_up_chunks_of_the_interleaved_schedule():
    m = get_model("llama2-70b")
    b, s, e = 1, 4096, 2
    layer = activations.saved_layer_bytes(m, b, s, e, 0, 0, 8)
    plain = activations.activation_bytes(m, b, s, e, 0, 0, 8, 4)
    # Megatron's schedule: 2 (p - 1) + (v - 1) p warm-up chunks then one, each L / (p v) layers
    for v in (2, 5):
        chunks = 2 * (4 - 1) + (v - 1) * 4 + 1
        held = chunks * m.num_layers / (4 * v)
        assert activations.activation_bytes(m, b, s, e, 0, 0, 8, 4, v) - plain == pytest.approx(
            (held - m.num_layers) * layer)
    assert activations.activation_bytes(m, b, s, e, 0, 0, 8, 4, 1) == plain


def _setup(v: int, ga: int = 8) -> TrainSetup:
    return TrainSetup(kind="pretrain", model=get_model("llama2-70b"), platform=resolve_platform("8xa100", None),
                      micro_batch=1, seq=4096, grad_accum=ga, tp=4, pp=2, pp_virtual=v, recompute="full")


def test_interleaving_shrinks_the_bubble_and_multiplies_the_sends():
    mach = machine_for(resolve_platform("8xa100", None), "bf16")
    one, two = estimate_train(_setup(1), mach).metrics, estimate_train(_setup(2), mach).metrics
    assert two["time"]["bubble_s"] == pytest.approx(one["time"]["bubble_s"] / 2, rel=0.02)
    assert two["time"]["step_s"] < one["time"]["step_s"]
    assert two["time"]["comm_s"] > one["time"]["comm_s"]  # twice the pipeline sends per micro-batch
    assert two["memory"]["activations_bytes"] > one["memory"]["activations_bytes"]


def test_config_names_the_chunks_only_where_there_are_several():
    assert "pp_virtual" not in _setup(1).config()
    assert _setup(2).config()["pp_virtual"] == 2


@pytest.mark.parametrize("pp, v, match", [(2, 3, "do not divide the 80 layers"), (1, 2, "give --pp 2 or more"),
                                          (2, 0, "must be a positive integer")])
def test_impossible_chunks_are_one_line(pp, v, match):
    with pytest.raises(UserError, match=match):
        TrainSetup(kind="pretrain", model=get_model("llama2-70b"), platform=resolve_platform("8xa100", None),
                   tp=4, pp=pp, pp_virtual=v)


def test_inference_refuses_it():
    with pytest.raises(UserError, match="does not apply"):
        estimate_request("infer", model="llama2-7b", hardware="a100", pp_virtual=2)


def test_each_pipeline_flush_pays_its_bubble():
    """A step whose micro-batches run as F separate pipelines (NeMo AutoModel's local batch)
    pays F bubbles: step(F) - step(1) = (F - 1) x the one-flush bubble."""
    mach = machine_for(resolve_platform("8xa100", None), "bf16")
    one = estimate_train(_setup(2), mach).metrics["time"]
    four = estimate_train(TrainSetup(kind="pretrain", model=get_model("llama2-70b"),
                                     platform=resolve_platform("8xa100", None), micro_batch=1, seq=4096,
                                     grad_accum=8, tp=4, pp=2, pp_virtual=2, pp_flushes=4, recompute="full"),
                          mach).metrics["time"]
    assert four["bubble_s"] == pytest.approx(4 * one["bubble_s"])
    assert four["step_s"] - one["step_s"] == pytest.approx(3 * one["bubble_s"])


@pytest.mark.parametrize("pp, flushes, ga, match", [(2, 3, 8, "does not divide the step's 8 micro-batches"),
                                                    (1, 2, 8, "give --pp 2 or more")])
def test_impossible_flushes_are_one_line(pp, flushes, ga, match):
    with pytest.raises(UserError, match=match):
        TrainSetup(kind="pretrain", model=get_model("llama2-70b"), platform=resolve_platform("8xa100", None),
                   tp=4, pp=pp, pp_flushes=flushes, grad_accum=ga)
