"""`--attn flash3`: FlashAttention-3 on Hopper at its published utilisation (0.75, arXiv
2407.08608), the rest of the estimate as flash's; refused elsewhere."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel.defaults import FLASH3_ATTENTION_EFFICIENCY
from llmdissect.perfmodel.request import build_estimate

TRAIN = dict(model="llama3-8b", hardware="h100", gpus=8, zero=3, seq=8192, recompute="full")


def test_flash3_runs_the_attention_at_its_own_rate_and_keeps_flashs_memory():
    fa2 = build_estimate("pretrain", dict(TRAIN, attn="flash"))
    fa3 = build_estimate("pretrain", dict(TRAIN, attn="flash3"))
    assert fa3.metrics["time"]["step_s"] < fa2.metrics["time"]["step_s"]
    assert fa3.metrics["memory"] == fa2.metrics["memory"]
    assert f"attention {FLASH3_ATTENTION_EFFICIENCY:.2f}" in " ".join(fa3.notes)
    # the attention's share shrinks by the ratio of the two efficiencies (0.35 -> 0.75), the rest stays
    infer2 = build_estimate("infer", dict(model="llama3-8b", hardware="h100", batch=8, input_len=4096, attn="flash"))
    infer3 = build_estimate("infer", dict(model="llama3-8b", hardware="h100", batch=8, input_len=4096,
                                          attn="flash3"))
    assert infer3.metrics["time"]["ttft_s"] < infer2.metrics["time"]["ttft_s"]


@pytest.mark.parametrize("hardware", ["a100", "rtx4090", "cpu"])
def test_flash3_is_for_hopper_only(hardware):
    with pytest.raises(UserError, match="Hopper"):
        build_estimate("infer", dict(model="tiny-llama", hardware=hardware, attn="flash3"))
