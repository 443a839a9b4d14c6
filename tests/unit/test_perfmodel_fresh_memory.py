"""First touch of memory mapped afresh (micro.fresh_memory, trainmodel.fresh_step_bytes):
a CPU step pays its transient memory at the measured rate, a GPU nothing. Closed forms."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import TrainSetup
from llmdissect.perfmodel.estimate import estimate_train
from llmdissect.perfmodel.roofline import fresh_memory_time_s
from llmdissect.specs import get_model, resolve_platform

BASE = {"peak_flops_per_s": {"fp32": 1e11}, "memory_bandwidth_bytes_per_s": 2e10}
RATE = 5e9


def _train(profile, nproc=1, ga=1, zero=0, hardware="cpu"):
    setup = TrainSetup(kind="pretrain", model=get_model("tiny-llama"), platform=resolve_platform(hardware, nproc),
                       zero=zero, dtype="fp32", seq=128, micro_batch=2, grad_accum=ga)
    return estimate_train(setup, machine_for(setup.platform, "fp32", profile)).metrics


@pytest.mark.parametrize("ga", [1, 3])
def test_a_cpu_step_pays_its_activations_per_micro_batch_and_the_rest_of_its_peak_once(ga):
    plain = _train({"cpu": BASE}, ga=ga)
    fresh = _train({"cpu": {**BASE, "fresh_memory_bytes_per_s": RATE}}, ga=ga)
    mem = fresh["memory"]
    acts, peak = mem["activations_bytes"], mem["step_peak_bytes"]
    assert peak > acts > 0
    assert fresh["time"]["forward_s"] - plain["time"]["forward_s"] == pytest.approx(ga * acts / RATE)
    assert fresh["time"]["step_s"] - plain["time"]["step_s"] == pytest.approx((ga * acts + peak - acts) / RATE)
    assert fresh["time"]["backward_s"] - plain["time"]["backward_s"] == pytest.approx((peak - acts) / RATE)


def test_processes_sharing_the_cpu_fault_at_their_share_of_the_rate():
    c = machine_for(resolve_platform("cpu", 2), "fp32", {"cpu": {**BASE, "fresh_memory_bytes_per_s": RATE}}).ceilings
    assert c.fresh_memory_bytes_per_s == RATE / 2
    assert fresh_memory_time_s(c, 1e9) == pytest.approx(2 * 1e9 / RATE)


@pytest.mark.parametrize("value", [None, 0, -1.0, True, "fast"])
def test_an_unmeasured_or_malformed_rate_costs_nothing(value):
    c = machine_for(resolve_platform("cpu"), "fp32", {"cpu": {**BASE, "fresh_memory_bytes_per_s": value}}).ceilings
    assert c.fresh_memory_bytes_per_s == 0.0 and fresh_memory_time_s(c, 1e9) == 0.0


def test_a_gpu_caching_allocator_pays_no_first_touch():
    profile = {"cpu": {**BASE, "fresh_memory_bytes_per_s": RATE}}
    c = machine_for(resolve_platform("h100"), "bf16", profile).ceilings
    assert c.fresh_memory_bytes_per_s == 0.0
