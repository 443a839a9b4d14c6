"""A GPU's weight-only kernels stream their quantized weights slower than a 16-bit product
(the dequantization inside them): weights.WEIGHT_STREAM_SCALE, held against torchao's own
batch-1 decode table (torchao/quantization/README.md at 03d01ad, one A100)."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.request import build_estimate

# torchao's table: tokens/s and "Memory Bandwidth (GB/s)" (the model's size x tokens/s)
TORCHAO = {"llama2-7b": {"none": (107.38, 1418.93), "int8-weight": (170.83, 1131.18), "int4-weight": (201.14, 751.42)},
           "llama3-8b": {"none": (95.64, 1435.54), "int8-weight": (153.03, 1150.80), "int4-weight": (180.80, 763.33)}}


@pytest.mark.parametrize("model", list(TORCHAO))
@pytest.mark.parametrize("quant", ["int8-weight", "int4-weight"])
def test_scale_is_torchaos_bandwidth_ratio(model, quant):
    ratio = TORCHAO[model][quant][1] / TORCHAO[model]["none"][1]
    assert wt.WEIGHT_STREAM_SCALE[quant] == pytest.approx(ratio, abs=0.01)


@pytest.mark.parametrize("quant,group", [("int8-weight", None), ("int4-weight", 64)])
def test_decode_speedup_over_bf16_is_torchaos(quant, group):
    # Llama-2-7B at batch 1 on one A100, as the table ran it: its tokens/s over bf16's
    base = dict(model="llama2-7b", hardware="a100", batch=1, input_len=8, output_len=200)
    bf16 = build_estimate("infer", base).metrics["decode_tokens_per_s"]
    q = build_estimate("infer", dict(base, quant=quant, group_size=group)).metrics["decode_tokens_per_s"]
    published = TORCHAO["llama2-7b"][quant][0] / TORCHAO["llama2-7b"]["none"][0]
    assert q / bf16 == pytest.approx(published, rel=0.10)


def test_cpus_keep_their_own_kernels():
    assert wt.weight_stream_scale("int4-weight", "cpu") == 1.0
    assert wt.weight_stream_scale("int4-weight", "gpu") == wt.WEIGHT_STREAM_SCALE["int4-weight"]
    assert wt.weight_stream_scale("none", "gpu") == 1.0
