"""Params offload under LoRA: the frozen base goes to the host with the other parameters (FSDP's
CPUOffload(offload_params=True), ZeRO-Infinity) and every micro-batch fetches this device's
partition of it, forward and backward."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.request import build_estimate
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform

BASE = dict(model="llama2-7b", hardware="rtx4090", gpus=2, micro_batch=1, seq=2048, zero=3, engine="deepspeed",
            recompute="full", lora_rank=64, quant="nf4")


def _m(**over):
    return build_estimate("finetune", {**BASE, **over}).metrics


def test_the_frozen_base_leaves_the_device_for_the_host():
    on, off = _m(), _m(offload="params")
    frozen_share = wt.model_weight_bytes(get_model("llama2-7b"), "nf4", 2) / 2  # ZeRO-3 over 2 devices
    host = off["memory"]["host_total_bytes"] / 2
    assert host >= frozen_share
    assert on["memory"]["params_bytes"] - off["memory"]["params_bytes"] > 0.5 * frozen_share


def test_each_micro_batch_fetches_the_frozen_partition_twice():
    one, two = _m(offload="params"), _m(offload="params", grad_accum=2)
    fetch = two["time"]["optimizer_s"] - one["time"]["optimizer_s"]  # optimizer_s carries the fetches
    frozen_share = wt.model_weight_bytes(get_model("llama2-7b"), "nf4", 2) / 2
    link = machine_for(resolve_platform("rtx4090", 2), "bf16", {}).host_link
    # the adapters' own partition rides along (a few per cent)
    assert fetch == pytest.approx(2 * frozen_share / (link.bandwidth_bytes_per_s * link.efficiency), rel=0.05)
