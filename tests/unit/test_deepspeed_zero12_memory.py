"""DeepSpeed's ZeRO-1/2 optimizer beyond the ZeRO paper's model states
(deepspeed/runtime/zero/stage_1_and_2.py): its partition cloned into fp32 even in fp32 training,
and the gradient staging bucket of reduce_bucket_size elements (fp32 at ZeRO-1, the compute
dtype at ZeRO-2; 5e8 by default, capped at the model's parameters by our bench)."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel.request import build_estimate
from llmdissect.perfmodel.trainmodel import DEEPSPEED_REDUCE_BUCKET, deepspeed_zero12_extra_bytes
from llmdissect.specs import get_model

TINY, BIG = get_model("tiny-llama"), get_model("llama2-7b")


def test_fp32_zero2_clones_its_partition_and_stages_a_model_sized_bucket():
    part = TINY.params / 2
    master, bucket = deepspeed_zero12_extra_bytes(TINY, 4, 2, 0, part)
    assert master == 4 * part
    assert bucket == TINY.params * 4


def test_mixed_precision_counts_no_second_master_and_zero1_stages_in_fp32():
    master, bucket = deepspeed_zero12_extra_bytes(BIG, 2, 1, 0, BIG.params / 8)
    assert master == 0  # the ZeRO paper's K = 12 already holds the fp32 master
    assert bucket == DEEPSPEED_REDUCE_BUCKET * 4
    assert deepspeed_zero12_extra_bytes(BIG, 2, 2, 0, BIG.params / 8)[1] == DEEPSPEED_REDUCE_BUCKET * 2


@pytest.mark.parametrize("zero,off,flat", [(3, 0, 1), (0, 0, 1), (2, 0, 0)])
def test_other_engines_and_stages_hold_none(zero, off, flat):
    assert deepspeed_zero12_extra_bytes(TINY, 4, zero, off, TINY.params, flat) == (0, 0)


def test_offloaded_optimizer_keeps_its_master_on_the_host():
    assert deepspeed_zero12_extra_bytes(TINY, 4, 2, 1, TINY.params / 2)[0] == 0


def test_the_estimate_carries_them_for_deepspeed_only():
    def total(engine):
        est = build_estimate("pretrain", dict(model="tiny-llama", hardware="cpu", gpus=2, zero=2, engine=engine,
                                              micro_batch=1, seq=128), calibration=None)
        return est.metrics["memory"]["total_bytes"]

    master, bucket = deepspeed_zero12_extra_bytes(TINY, 4, 2, 0, TINY.params / 2)
    assert total("deepspeed") - total("fsdp") == pytest.approx(master + bucket, rel=0.05)
