"""ZeRO-3 / FSDP holds two units gathered beside its shard (the one in use and the one
prefetched): two decoder layers, or the root's embedding and head with a layer, less the 1/dp
the shard already holds; a frozen QLoRA base gathers in its quantized storage."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.request import build_estimate
from llmdissect.perfmodel.trainmodel import zero3_gathered_bytes
from llmdissect.specs import get_model

M = get_model("llama2-7b")


def test_two_units_less_the_shard():
    layer, root = M.params_per_layer * 2, (M.params_embedding + M.params_head) * 2
    assert root > layer  # Llama 2 7B: the embedding and head outweigh a layer
    assert zero3_gathered_bytes(M, 2, 1, 1, 4) == pytest.approx((root + layer) * (1 - 1 / 4))
    assert zero3_gathered_bytes(M, 2, 1, 1, 1) == 0  # one rank holds everything already


def test_a_quantized_base_gathers_its_layers_quantized():
    frozen = wt.model_weight_bytes(M, "nf4", 2)
    root = (M.params_embedding + M.params_head) * 2
    layer = (frozen - root) / M.num_layers
    assert zero3_gathered_bytes(M, 2, 1, 1, 2, lora=1, frozen_weight_bytes=frozen) == pytest.approx(
        (root + layer) / 2)


def test_only_zero3_pays_it_beside_its_shard():
    def memory(zero):
        est = build_estimate("pretrain", dict(model="llama2-7b", hardware="8xa100", micro_batch=1, seq=2048,
                                              zero=zero, engine="fsdp"))
        return est.metrics["memory"]

    three, two = memory(3), memory(2)
    assert three["params_bytes"] == pytest.approx(M.params * 2 / 8)  # the ZeRO paper's shard, as before
    assert two["params_bytes"] == pytest.approx(M.params * 2)
    # the gathered units are a transient of the step, beside the same gradients and activations
    assert three["step_peak_bytes"] - two["step_peak_bytes"] == pytest.approx(zero3_gathered_bytes(M, 2, 1, 1, 8))
