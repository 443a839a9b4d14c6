"""FLOPs and fewest bytes of each operator against closed forms worked out by hand, and the
bench-ops cases carrying the same counts perfmodel uses (no torch)."""
import pytest

from llmdissect.micro import ops_quant
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel import weights as wt


def test_linear_forward_and_backward():
    # X [8, 4] W [3, 4]: 8*3 outputs of 4 multiply-adds = 192 FLOPs; read 32 + 12, write 24 fp32
    c = opc.linear(8, 4, 3, 4, "fwd")
    assert c.flops == 192 and c.bytes == 4 * (32 + 12 + 24)
    assert c.intensity == pytest.approx(192 / 272)
    # dX = dY W (192) and dW = dY^T X (192); read dY 24, W 12, X 32; write dX 32, dW 12 (bf16)
    b = opc.linear(8, 4, 3, 2, "bwd")
    assert b.flops == 384 and b.bytes == 2 * (24 + 12 + 32 + 32 + 12)
    # the activations' share alone: X and Y forward; dY, X and dX backward
    assert opc.linear_io_bytes(8, 4, 3, 4) == 4 * (32 + 24)
    assert opc.linear_io_bytes(8, 4, 3, 2, "bwd") == 2 * (24 + 32 + 32)
    assert opc.linear_flops(8, 4, 3) == 192 and opc.linear_flops(8, 4, 3, "bwd") == 384


def test_attention_counts_only_unmasked_pairs():
    # b=2, s=4, a=2 heads, g=1 kv head, d=8: 10 unmasked pairs per head, two products of 2*8 each
    c = opc.attention(2, 4, 2, 1, 8, 4, "fwd")
    assert c.flops == 2 * 2 * 10 * 2 * 2 * 8
    assert c.bytes == 4 * 2 * 4 * 8 * (2 * 2 + 2 * 1)  # q, o [2,2,4,8]; k, v [2,1,4,8]
    b = opc.attention(2, 4, 2, 1, 8, 4, "bwd")
    assert b.flops == 2 * c.flops
    assert b.bytes == 4 * 2 * 4 * 8 * (4 * 2 + 4 * 1)  # q, o, dO, dq and k, v, dk, dv


def test_attention_pairs_full_square_and_eager_scores():
    assert opc.attention_pairs(4) == 10 and opc.attention_pairs(4, causal=0) == 16
    assert opc.attention_product_flops(10, 2, 8) == 10 * 2 * 2 * 8  # one product: 2d per pair per head
    # eager (full square): 2 sequences x 16 pairs x 2 heads x 2 products x 2*8
    assert opc.attention_flops(2, 4, 2, 8, causal=0) == 2 * 16 * 2 * 2 * 2 * 8
    # eager writes and re-reads the [2, 2, 4, 4] scores 4 times
    assert opc.eager_scores_bytes(2, 4, 2, 2) == 4 * 2 * 2 * 16 * 2


def test_elementwise_operators():
    assert opc.rmsnorm(10, 6, 4, "fwd") == opc.Cost(240, 4 * (120 + 6))
    assert opc.rmsnorm(10, 6, 4, "bwd") == opc.Cost(480, 4 * (180 + 12))
    # RoPE: q 10x8 and k 10x4 -> 120 elements, 3 FLOPs each; cos and sin [10, 2]
    assert opc.rope(10, 8, 4, 2, 2, "fwd") == opc.Cost(360, 2 * (240 + 40))
    assert opc.rope(10, 8, 4, 2, 2, "bwd").flops == 720
    assert opc.swiglu(5, 7, 4, "fwd") == opc.Cost(175, 4 * 105)
    assert opc.swiglu(5, 7, 4, "bwd") == opc.Cost(350, 4 * 175)
    assert opc.softmax(3, 5, 4, "fwd") == opc.Cost(75, 120)
    assert opc.softmax(3, 5, 4, "bwd") == opc.Cost(150, 180)
    assert opc.residual_add(5, 7, 2) == opc.Cost(35, 2 * 3 * 35)  # read two, write one


def test_embedding_loss_and_adamw():
    assert opc.embedding(6, 100, 8, 4, "fwd") == opc.Cost(0, 48 + 2 * 4 * 48)
    # backward writes the dense [100, 8] table gradient
    assert opc.embedding(6, 100, 8, 4, "bwd") == opc.Cost(48, 48 + 4 * 48 + 4 * 800)
    assert opc.cross_entropy(6, 100, "fwd") == opc.Cost(2400, 2400 + 48 + 4)
    assert opc.cross_entropy(6, 100, "bwd") == opc.Cost(4800, 2400 + 48 + 2400)
    assert opc.adamw(1000) == opc.Cost(13000, 28000)


def test_optimizer_step_bytes():
    # fp32 AdamW: read p, g, m, v and write p, m, v, 4 bytes each
    assert opc.optimizer_step_bytes_per_param(4, "adamw") == 7 * 4
    # bf16 mixed precision: p, g, p out in bf16; fp32 master, m, v read and written
    assert opc.optimizer_step_bytes_per_param(2, "adamw") == 3 * 2 + 2 * 12
    assert opc.optimizer_step_bytes_per_param(4, "sgd") == 3 * 4 + 2 * 4  # momentum only


def test_quantized_weights():
    # W [128, 64] = 8192 weights. NF4: 4096 B of codes + 128 blocks; fp32 absmax (512 B)
    # without double quantization, else uint8 absmax (128 B) + 1 fp32 nested scale + the
    # 256-entry fp32 nested code; both keep the 16-entry fp32 NF4 code (64 B)
    assert opc.quant_storage_bytes(64, 128, 4, "nf4", double_quant=False) == 4096 + 512 + 64
    assert opc.quant_storage_bytes(64, 128, 4, "nf4") == 4096 + 128 + 4 + 1024 + 64
    # LLM.int8: 8192 B + an fp32 scale per row; torchao int8: + an fp32 scale and int8 zero point per row
    assert opc.quant_storage_bytes(64, 128, 2, "int8-bnb") == 8192 + 512
    assert opc.quant_storage_bytes(64, 128, 2, "int8-weight") == 8192 + 128 * 5
    assert opc.quantize(64, 128, 4, "nf4", False) == opc.Cost(0, 4 * 8192 + 4672)
    assert opc.dequantize(64, 128, 2, "int8-bnb") == opc.Cost(0, 8704 + 2 * 8192)
    mm = opc.quant_linear(16, 64, 128, 4, "nf4", False)
    assert mm.flops == 2 * 16 * 64 * 128 and mm.bytes == 4 * 16 * 64 + 4672 + 4 * 16 * 128


def test_bench_ops_quant_rows_weigh_what_perfmodel_weighs():
    # the cases `bench ops` times (torch is only imported when a case is made)
    T, k, n, e = 32, 384, 1024, 2
    cases = {c.op: c for c in ops_quant._bnb_cases(lambda: None, T, k, n, e)}
    cases["torchao"] = ops_quant._torchao_case(lambda: None, T, k, n, e)
    io = opc.linear_io_bytes(T, k, n, e)
    nf4 = wt.nf4_bytes(k * n, double_quant=ops_quant.NF4_DOUBLE_QUANT)
    assert cases["nf4 matmul (bnb)"].cost.bytes - io == nf4
    assert cases["nf4 dequantize (bnb)"].cost.bytes == nf4 + e * k * n
    assert cases["int8 matmul (bnb LLM.int8)"].cost.bytes - io == wt.int8_bnb_bytes(n, k)
    assert cases["torchao"].cost.bytes - io == wt.int8_torchao_bytes(n, k)
    assert cases["nf4 matmul (bnb)"].cost.flops == opc.linear(T, k, n, e).flops


def test_bad_pass_and_quantization_are_refused():
    with pytest.raises(ValueError):
        opc.linear(1, 1, 1, 4, "sideways")
    from llmdissect.errors import UserError

    with pytest.raises(UserError):
        opc.quant_storage_bytes(64, 128, 2, "fp3")


def test_unfused_adamw_traffic_counts_each_ops_own_pass():
    # torch's unfused AdamW: 8 ops of 2 + 3 + 2 + 3 + 2 + 2 + 2 + 4 fp32 reads and writes
    assert opc.optimizer_step_traffic_bytes_per_param(4, "adamw") == 80
    assert opc.optimizer_step_traffic_bytes_per_param(2, "adam") == 80
    # a fused kernel moves the fewest bytes
    fused = opc.optimizer_step_bytes_per_param(4, "adamw-fused")
    assert opc.optimizer_step_traffic_bytes_per_param(4, "adamw-fused", cache_bytes=1e9) == fused
    assert opc.optimizer_step_traffic_bytes_per_param(4, "adamw-fused") == fused
    assert opc.optimizer_step_traffic_bytes_per_param(4, "sgd") == 3 * 4 + 2 * 4


def test_unfused_adamw_moves_the_fewest_bytes_over_tensors_that_stay_in_cache():
    from llmdissect.specs import get_model

    m = get_model("tiny-llama")
    from llmdissect.perfmodel.layertime import model_param_tensors

    tensors = model_param_tensors(m)
    assert sum(c * n for c, n in tensors) == m.params
    # no cache (a GPU): every tensor makes its 20 passes
    assert opc.optimizer_step_traffic_bytes_per_param(4, "adamw", tensors, 0.0) == 80
    # a cache that holds every layer tensor's six fp32 copies but not the 8192 x 384 tables
    big = m.vocab_size * m.hidden_size
    spilled = 2 * big / m.params
    got = opc.optimizer_step_traffic_bytes_per_param(4, "adamw", tensors, 6 * 4 * big - 1)
    assert got == pytest.approx(28 + 52 * spilled)
    # sharded two ways, the tables fit too
    assert opc.optimizer_step_traffic_bytes_per_param(4, "adamw", tensors, 6 * 4 * big - 1, shard=2) == 28
    # LoRA's adapters (tensors=None) are small: cached on a CPU
    assert opc.optimizer_step_traffic_bytes_per_param(4, "adamw", None, 32 * 2**20) == 28
