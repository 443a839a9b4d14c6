"""FLOPs and fewest bytes of each operator against closed forms worked out by hand."""
import pytest

from llmdissect.micro import op_defs as od


def test_linear_forward_and_backward():
    # X [8, 4] W [3, 4]: 8*3 outputs of 4 multiply-adds = 192 FLOPs; read 32 + 12, write 24 fp32
    c = od.linear(8, 4, 3, 4, "fwd")
    assert c.flops == 192 and c.bytes == 4 * (32 + 12 + 24)
    assert c.intensity == pytest.approx(192 / 272)
    # dX = dY W (192) and dW = dY^T X (192); read dY 24, W 12, X 32; write dX 32, dW 12 (bf16)
    b = od.linear(8, 4, 3, 2, "bwd")
    assert b.flops == 384 and b.bytes == 2 * (24 + 12 + 32 + 32 + 12)


def test_attention_counts_only_unmasked_pairs():
    # b=2, s=4, a=2 heads, g=1 kv head, d=8: 10 unmasked pairs per head, two products of 2*8 each
    c = od.attention(2, 4, 2, 1, 8, 4, "fwd")
    assert c.flops == 2 * 2 * 10 * 2 * 2 * 8
    assert c.bytes == 4 * 2 * 4 * 8 * (2 * 2 + 2 * 1)  # q, o [2,2,4,8]; k, v [2,1,4,8]
    b = od.attention(2, 4, 2, 1, 8, 4, "bwd")
    assert b.flops == 2 * c.flops
    assert b.bytes == 4 * 2 * 4 * 8 * (4 * 2 + 4 * 1)  # q, o, dO, dq and k, v, dk, dv


def test_elementwise_operators():
    assert od.rmsnorm(10, 6, 4, "fwd") == od.Cost(240, 4 * (120 + 6))
    assert od.rmsnorm(10, 6, 4, "bwd") == od.Cost(480, 4 * (180 + 12))
    # RoPE: q 10x8 and k 10x4 -> 120 elements, 3 FLOPs each; cos and sin [10, 2]
    assert od.rope(10, 8, 4, 2, 2, "fwd") == od.Cost(360, 2 * (240 + 40))
    assert od.rope(10, 8, 4, 2, 2, "bwd").flops == 720
    assert od.swiglu(5, 7, 4, "fwd") == od.Cost(175, 4 * 105)
    assert od.swiglu(5, 7, 4, "bwd") == od.Cost(350, 4 * 175)
    assert od.softmax(3, 5, 4, "fwd") == od.Cost(75, 120)
    assert od.softmax(3, 5, 4, "bwd") == od.Cost(150, 180)


def test_embedding_loss_and_adamw():
    assert od.embedding(6, 100, 8, 4, "fwd") == od.Cost(0, 48 + 2 * 4 * 48)
    # backward writes the dense [100, 8] table gradient
    assert od.embedding(6, 100, 8, 4, "bwd") == od.Cost(48, 48 + 4 * 48 + 4 * 800)
    assert od.cross_entropy(6, 100, "fwd") == od.Cost(2400, 2400 + 48 + 4)
    assert od.cross_entropy(6, 100, "bwd") == od.Cost(4800, 2400 + 48 + 2400)
    assert od.adamw(1000) == od.Cost(13000, 28000)


def test_quantized_weights():
    # W [128, 64]: NF4 4096 B of codes + 128 blocks x 4 B; int8 8192 B + 128 rows x 4 B
    assert od.quant_storage_bytes(64, 128, "nf4") == 4096 + 512
    assert od.quant_storage_bytes(64, 128, "int8") == 8192 + 512
    assert od.quantize(64, 128, 4, "nf4") == od.Cost(0, 4 * 8192 + 4608)
    assert od.dequantize(64, 128, 2, "int8") == od.Cost(0, 8704 + 2 * 8192)
    mm = od.quant_linear(16, 64, 128, 4, "nf4")
    assert mm.flops == 2 * 16 * 64 * 128 and mm.bytes == 4 * 16 * 64 + 4608 + 4 * 16 * 128


def test_bad_pass_is_refused():
    with pytest.raises(ValueError):
        od.linear(1, 1, 1, 4, "sideways")
