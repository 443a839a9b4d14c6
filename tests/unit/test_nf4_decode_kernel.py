"""bitsandbytes' batch-1 4-bit kernel: a decode step at batch 1 reads NF4 weights at the kernel's
published speed-up over a 16-bit product (bitsandbytes 0.40.0: 3.4x Ampere, 4.0x Ada/Hopper);
any other product dequantizes the weight first (a copy written and read in 16 bits)."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.layertime import layer_gemm_time_s
from llmdissect.perfmodel.request import build_estimate
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform

M = get_model("llama2-7b")


def _elements() -> float:
    return wt.layer_weight_bytes(M, "none", 2) / 2


@pytest.mark.parametrize("arch,speedup", [("ampere", 3.4), ("ada", 4.0), ("hopper", 4.0)])
def test_batch_one_reads_the_16_bit_bytes_over_the_published_speedup(arch, speedup):
    got = wt.decode_layer_read_bytes(M, "nf4", 2, architecture=arch, batch=1)
    assert got == pytest.approx(_elements() * 2 / speedup)


@pytest.mark.parametrize("kw", [dict(architecture="ampere", batch=2), dict(architecture="ampere", device_kind="cpu"),
                                dict(architecture="blackwell"), dict(architecture="ampere", batch=1, quant="int8-bnb")])
def test_elsewhere_the_weight_is_dequantized_first(kw):
    quant = kw.pop("quant", "nf4")
    assert wt.decode_layer_read_bytes(M, quant, 2, **kw) == wt.layer_read_bytes(M, quant, 2)


def test_the_product_runs_that_much_faster_than_a_16_bit_one():
    c = machine_for(resolve_platform("a100"), "bf16", {}).ceilings
    bf16 = layer_gemm_time_s(c, M, 1, 2, wt.layer_read_bytes(M, "none", 2))
    nf4 = layer_gemm_time_s(c, M, 1, 2, wt.decode_layer_read_bytes(M, "nf4", 2, architecture="ampere"))
    assert bf16 / nf4 == pytest.approx(3.4, rel=0.02)  # the activations' few bytes aside


def test_estimate_decodes_faster_at_batch_one_and_slower_above_it():
    def tpot(quant, batch):
        est = build_estimate("infer", dict(model="llama2-7b", hardware="a100", quant=quant, batch=batch))
        return est.metrics["time"]["tpot_s"]

    assert tpot("none", 1) / 3.4 < tpot("nf4", 1) < tpot("none", 1)
    assert tpot("nf4", 2) > 1.5 * tpot("none", 2)  # the dequantized copy: written and read in 16 bits
