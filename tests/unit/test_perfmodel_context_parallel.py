"""Context parallelism (`--cp C`): each device runs 1/C of every sequence; the attention core
sees the whole sequence, balanced over the C ranks, its keys and values passed around a ring
(comm.ring_attention_bytes); ZeRO shards and gradients span dp x C ranks. No torch."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import activations, comm
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import TrainSetup
from llmdissect.perfmodel.estimate import estimate_train
from llmdissect.specs import get_model, resolve_platform


def test_ring_bytes_are_the_other_chunks_keys_and_values():
    m = get_model("llama3-8b")  # 8 kv heads of 128
    # 3 other chunks of 2 x 2048 tokens, K and V, 8 x 128 values each, bf16, no TP
    assert comm.ring_attention_bytes(m, 2, 2048, 2, 1, 4) == 3 * 2 * 2048 * 2 * 8 * 128 * 2
    assert comm.ring_attention_bytes(m, 2, 2048, 2, 8, 4) == 3 * 2 * 2048 * 2 * 8 * 128 * 2 / 8
    assert comm.ring_attention_bytes(m, 2, 2048, 2, 1, 1) == 0


def _setup(cp: int, **kw) -> TrainSetup:
    return TrainSetup(kind="pretrain", model=get_model("llama3-8b"), platform=resolve_platform("8xh100", None),
                      seq=8192, zero=3, recompute="full", cp=cp, **kw)


def _estimate(setup: TrainSetup):
    return estimate_train(setup, machine_for(setup.platform, "bf16")).metrics


def test_one_rank_of_context_is_no_context_parallelism():
    a, b = _estimate(_setup(1)), _estimate(TrainSetup(kind="pretrain", model=get_model("llama3-8b"),
                                                       platform=resolve_platform("8xh100", None), seq=8192, zero=3,
                                                       recompute="full"))
    assert a == b


def test_each_device_holds_its_chunk_of_the_activations():
    m = get_model("llama3-8b")
    got = _estimate(_setup(2))["memory"]["activations_bytes"]
    assert got == pytest.approx(activations.activation_bytes(m, 1, 4096, 2, 0, 2))
    assert got < _estimate(_setup(1))["memory"]["activations_bytes"] / 1.9


def test_tokens_per_step_count_the_data_parallel_groups_not_the_chunks():
    one, two = _estimate(_setup(1)), _estimate(_setup(2))
    assert one["data_parallel"] == 8 and two["data_parallel"] == 4
    # a step of one 8192-token sequence per data-parallel group
    assert two["tokens_per_s"] * two["time"]["step_s"] == pytest.approx(4 * 8192)
    assert one["tokens_per_s"] * one["time"]["step_s"] == pytest.approx(8 * 8192)
    # the FLOPs of a token are those of its whole sequence's context, not its chunk's
    assert two["model_flops_per_token"] == one["model_flops_per_token"]


def test_a_slow_ring_shows_in_the_step():
    """Over a network too slow to hide behind the attention, the ring's excess adds to comm_s."""
    from dataclasses import replace

    setup = _setup(2)
    mach = machine_for(setup.platform, "bf16")
    slow = replace(mach, network=replace(mach.network, bandwidth_bytes_per_s=mach.network.bandwidth_bytes_per_s / 1e4))
    fast_m, slow_m = estimate_train(setup, mach).metrics, estimate_train(setup, slow).metrics
    assert slow_m["time"]["step_s"] > fast_m["time"]["step_s"]
    assert setup.config()["cp"] == 2 and "cp" not in _setup(1).config()


@pytest.mark.parametrize("kw, match", [(dict(cp=3), "does not divide the 8 devices"),
                                       (dict(cp=2, seq=4098), "does not split into 2 x --cp 2"),
                                       (dict(cp=2, attn="eager"), "use --attn sdpa or flash"),
                                       (dict(cp=0), "must be a positive integer")])
def test_impossible_context_parallelism_is_one_line(kw, match):
    base = dict(kind="pretrain", model=get_model("llama3-8b"), platform=resolve_platform("8xh100", None), seq=8192)
    with pytest.raises(UserError, match=match):
        TrainSetup(**{**base, **kw})
