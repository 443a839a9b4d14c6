"""`--head parallel|gathered|replicated`: the output head and loss under tensor parallelism as
Megatron / torchtitan (vocabulary-parallel), NeMo AutoModel (product sharded, fp32 logits
gathered, a whole loss on every rank) and bench's TP plan (all whole) run them."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.layertime import head_backward_time_s, head_forward_time_s
from llmdissect.perfmodel.request import build_estimate
from llmdissect.perfmodel.roofline import memory_time_s
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform

M = get_model("llama3-8b")
C = machine_for(resolve_platform("h100"), "bf16", {}).ceilings
T = 8192


def test_shards():
    assert opc.head_shards(0, 4) == (4, 4)
    assert opc.head_shards(1, 4) == (4, 1)
    assert opc.head_shards(2, 4) == (1, 1)


def test_replicated_runs_the_whole_head_on_every_rank():
    whole_fwd = head_forward_time_s(C, M, T, 2, tp=1)
    assert head_forward_time_s(C, M, T, 2, tp=4, head=2) == pytest.approx(whole_fwd)
    assert head_backward_time_s(C, M, T, 2, tp=4, head=2) == pytest.approx(head_backward_time_s(C, M, T, 2, tp=1))
    assert head_forward_time_s(C, M, T, 2, tp=4, head=0) < whole_fwd / 2


def test_gathered_shards_the_product_and_not_the_loss():
    parallel, gathered = (head_forward_time_s(C, M, T, 2, tp=4, head=h) for h in (0, 1))
    loss_pass = memory_time_s(C, opc.cross_entropy(T, M.vocab_size, "fwd").bytes)  # the loss's bytes, whole
    assert gathered - parallel == pytest.approx(loss_pass * (1 - 1 / 4), rel=1e-6)


@pytest.mark.parametrize("head,split", [(0, 4), (1, 1), (2, 1)])
def test_only_a_vocabulary_parallel_loss_splits_the_logits(head, split):
    b, s = 2, 4096
    kept = act.activation_bytes(M, b, s, 2, 0, 2, tp=4, head=head) - act.activation_bytes(M, b, s, 2, 0, 2, tp=4,
                                                                                              head=0)
    assert kept == pytest.approx(act.logits_bytes(M, b, s, 2) * (1 / split - 1 / 4))


def test_estimate_gathers_the_fp32_logits():
    def comm(head):
        est = build_estimate("pretrain", dict(model="llama3-8b", hardware="8xh100", gpus=8, tp=4, micro_batch=1,
                                              seq=4096, head=head))
        return est.metrics["time"]["comm_s"]

    assert comm("gathered") > comm("parallel") == pytest.approx(comm("replicated"))
    with pytest.raises(UserError, match="head"):
        build_estimate("pretrain", dict(model="llama3-8b", hardware="8xh100", tp=4, head="sharded"))
