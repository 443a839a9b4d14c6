"""The training estimate's --engine: which engine runs a step changes how many collectives a
sharded pass makes and how the optimizer sees its parameters. Closed forms, no timing."""
from __future__ import annotations

import math

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import DEEPSPEED_BUCKET_ELEMENTS, TrainSetup
from llmdissect.perfmodel.estimate import estimate_train
from llmdissect.perfmodel.layertime import model_param_tensors
from llmdissect.specs import get_model, resolve_platform

PROFILE = {"cpu": {"peak_flops_per_s": {"fp32": 1e11}, "memory_bandwidth_bytes_per_s": 2e10,
                   "last_level_cache_bytes": 32 * 2**20}}


def _setup(engine, zero=2, model="tiny-llama", nproc=2):
    return TrainSetup(kind="pretrain", model=get_model(model), platform=resolve_platform("cpu", nproc), zero=zero,
                      dtype="fp32", seq=64, engine_name=engine)


def test_auto_picks_as_bench_pretrain_and_deepspeed_buckets_its_collectives():
    assert _setup("auto").engine == "fsdp" and _setup("auto").sharded_calls == 7
    assert _setup("deepspeed").sharded_calls == 1  # tiny-llama's 16 M parameters fill one bucket
    big = TrainSetup(kind="pretrain", model=get_model("llama2-70b"), platform=resolve_platform("a800", 8), zero=2,
                     engine_name="deepspeed")
    assert big.sharded_calls == math.ceil(get_model("llama2-70b").params / DEEPSPEED_BUCKET_ELEMENTS)


def test_deepspeed_steps_one_flat_partition_and_copies_it_back():
    m = get_model("tiny-llama")
    mach = machine_for(resolve_platform("cpu", 2), "fp32", PROFILE)
    fsdp = estimate_train(_setup("fsdp"), mach).metrics["time"]["optimizer_s"]
    ds = estimate_train(_setup("deepspeed"), mach).metrics["time"]["optimizer_s"]
    c = mach.ceilings
    local = m.params / 2
    # FSDP: torch's optimizer over each parameter's shard, the small ones in the cache;
    # DeepSpeed: one flat partition of 8 M parameters, which spills (80 bytes each), plus
    # 2 x 4 bytes to copy it back into the parameters; and at the step its own copies
    # (sharding_copies: flatten 1/2, the 16-bit buffer 1/2, the norm's read 1/2 of all
    # gradients: 1.5 passes of 2 x 4 bytes over all 16 M)
    per_tensor = opc.optimizer_step_traffic_bytes_per_param(4, "adamw", model_param_tensors(m), c.cache_bytes, 2)
    assert per_tensor < opc.ADAMW_UNFUSED_PASSES * 4
    assert fsdp == pytest.approx(local * per_tensor / c.bytes_per_s())
    assert ds == pytest.approx((local * (opc.ADAMW_UNFUSED_PASSES * 4 + 8) + 1.5 * 8 * m.params) / c.bytes_per_s())


@pytest.mark.parametrize("engine,zero,nproc,offload,fragment", [
    ("ddp", 3, 2, "none", "--zero 3 does not run on --engine ddp"),
    ("fsdp", 1, 2, "none", "--zero 1 does not run on --engine fsdp"),
    ("single", 0, 2, "none", "--engine single runs one process"),
    ("fsdp", 2, 2, "optimizer", "--offload optimizer runs on --engine deepspeed only"),
    ("megatron", 0, 1, "none", "engine"),
])
def test_an_engine_that_cannot_run_the_setup_is_one_clear_error(engine, zero, nproc, offload, fragment):
    with pytest.raises(UserError, match=fragment.replace("-", r"\-")):
        TrainSetup(kind="pretrain", model=get_model("tiny-llama"), platform=resolve_platform("cpu", nproc),
                   zero=zero, offload=offload, dtype="fp32", seq=64, engine_name=engine)


def test_sharding_copies_follow_each_engines_source():
    # FSDP2 ZeRO-3 on 2 gloo ranks: copy-in 1/2 + copy-out 1 per gather, in forward and again
    # in backward; chunk-cat 1 and gloo's AVG divide 1 per reduce-scatter; two calls a tensor
    # per gather
    f3 = opc.sharding_copies(1, 0, 3, 2, divides=1)
    assert (f3.fwd_weights, f3.bwd_weights, f3.bwd_grads, f3.opt_grads) == (1.5, 1.5, 2, 0)
    assert (f3.fwd_calls, f3.bwd_calls) == (2, 2)
    # ZeRO-2 keeps the gathered weights for backward; NCCL averages without a divide
    f2 = opc.sharding_copies(1, 0, 2, 4, divides=0)
    assert (f2.fwd_weights, f2.bwd_weights, f2.bwd_grads) == (1.25, 0, 1)
    # DeepSpeed ZeRO-2: bucket copy-in 1, divide 1, partition out 1/n; at the step flatten
    # 1/n, the 16-bit buffer 1/n and half a pass to read the norm
    d2 = opc.sharding_copies(0, 1, 2, 4)
    assert (d2.fwd_weights, d2.bwd_weights, d2.bwd_grads, d2.opt_grads) == (0, 0, 2.25, 1.0)
    assert (d2.fwd_calls, d2.bwd_calls) == (0, 1)
    # one rank, DDP and a single process copy nothing of the kind
    for copies in (opc.sharding_copies(1, 0, 3, 1), opc.sharding_copies(0, 0, 0, 8), opc.sharding_copies(0, 0, 0, 1)):
        assert copies == opc.ShardingCopies()


def test_sharding_copies_cost_their_bytes_in_forward_and_backward():
    m = get_model("tiny-llama")
    mach = machine_for(resolve_platform("cpu", 2), "fp32", {"cpu": {**PROFILE["cpu"], "op_fixed_s": 1e-5}})
    c = mach.ceilings
    assert c.op_fixed_s == 1e-5
    fsdp = estimate_train(_setup("fsdp", zero=3), mach).metrics["time"]
    tensors = sum(count for count, _ in model_param_tensors(m))
    one_pass = 2 * 4 * m.params / c.bytes_per_s()  # read and write every fp32 parameter once
    # forward: 1.5 passes over the weights and 2 calls a tensor, on top of the compute that a
    # single rank's estimate of the same micro-batch has
    single = estimate_train(TrainSetup(kind="pretrain", model=m, platform=resolve_platform("cpu", 2), zero=0,
                                       dtype="fp32", seq=64, engine_name="ddp"), mach).metrics["time"]
    assert fsdp["forward_s"] - single["forward_s"] == pytest.approx(1.5 * one_pass + 2 * tensors * c.op_fixed_s)
    assert fsdp["backward_s"] - single["backward_s"] == pytest.approx(3.5 * one_pass + 2 * tensors * c.op_fixed_s)
