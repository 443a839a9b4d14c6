"""The layer time model counts what `bench ops` rows count (perfmodel.op_costs), checked
against closed forms by putting one ceiling out of reach (no torch)."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel import layertime as lt
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.roofline import Ceilings
from llmdissect.specs import get_model

EFF = {"gemm": 1.0, "attention": 1.0, "memory": 1.0}
FLOPS_ONLY = Ceilings(1.0, 1e30, EFF)  # time = FLOPs
BYTES_ONLY = Ceilings(1e30, 1.0, EFF)  # time = bytes


@pytest.fixture(scope="module")
def m():
    return get_model("tiny-llama")


def test_per_token_flops_are_op_costs_at_one_token(m):
    h, f, V = m.hidden_size, m.intermediate_size, m.vocab_size
    assert fl.qkv_flops_fwd(m) == 2 * h * (m.q_dim + 2 * m.kv_dim)
    assert fl.mlp_flops_fwd(m) == 6 * h * f == opc.linear(1, h, 2 * f, 2).flops + opc.linear(1, f, h, 2).flops
    assert fl.head_flops_fwd(m) == opc.linear(1, h, V, 2).flops
    assert fl.scores_flops_fwd(m, 64) == 2 * 64 * m.q_dim
    assert fl.rmsnorm_flops_fwd(m) == 2 * opc.rmsnorm(1, h, 2).flops
    assert fl.rope_flops_fwd(m) == opc.rope(1, m.q_dim, m.kv_dim, m.head_dim, 2).flops
    assert fl.swiglu_flops_fwd(m) == opc.swiglu(1, f, 2).flops
    assert fl.softmax_flops_fwd(m, 64) == opc.softmax(m.num_heads, 64, 2).flops
    assert fl.loss_flops_fwd(m) == opc.cross_entropy(1, V).flops
    # one sequence's full square, per token, is PaLM's 4 s d_attn
    s = 64
    assert fl.layer_attention_flops_fwd(m, s) * s == opc.attention_flops(1, s, m.num_heads, m.head_dim, causal=0)


def test_layer_gemms_are_the_bench_projections(m):
    T, e = 256, 2
    h, f, q, kv = m.hidden_size, m.intermediate_size, m.q_dim, m.kv_dim
    rows = [(h, q), (h, kv), (h, kv), (q, h), (h, f), (h, f), (f, h)]  # q k v o gate up down, as bench ops
    assert lt.layer_gemm_time_s(FLOPS_ONLY, m, T, e, 0) == sum(opc.linear(T, k, n, e).flops for k, n in rows)
    # one nn.Linear each, as transformers' Llama runs them: each reads its input and writes its output
    weights = e * lt.layer_weight_elements(m)
    io = e * T * sum(k + n for k, n in rows)
    gpu = Ceilings(1e30, 1.0, EFF, asynchronous=True)
    assert lt.layer_gemm_time_s(gpu, m, T, e, weights) == weights + io
    # on a CPU the activations move once more, apart from the kernel (gemm_activation_time_s)
    assert lt.layer_gemm_time_s(BYTES_ONLY, m, T, e, weights) == weights + 2 * io


def test_a_cpu_product_moves_its_activations_at_the_element_wise_rate():
    from llmdissect.perfmodel.roofline import gemm_activation_time_s, gemm_time_s

    cpu = Ceilings(1e12, 1e11, {**EFF, "memory": 0.4})
    io = opc.linear_io_bytes(256, 384, 1024, 4)
    assert io == 4 * 256 * (384 + 1024)
    assert gemm_activation_time_s(cpu, io) == pytest.approx(io / (1e11 * 0.4))
    flops = opc.linear_flops(256, 384, 1024)
    assert gemm_time_s(cpu, flops, 0.0, None, io) == pytest.approx(flops / 1e12 + io / 4e10)
    gpu = Ceilings(1e12, 1e11, {**EFF, "memory": 0.4}, asynchronous=True)
    assert gemm_activation_time_s(gpu, io) == 0.0 and gemm_time_s(gpu, flops, 0.0, None, io) == flops / 1e12


@pytest.mark.parametrize("eager", [0, 1])
def test_attention_core_causal_pairs_or_the_eager_square(m, eager):
    b, s, e = 2, 64, 2
    a, g, d = m.num_heads, m.num_kv_heads, m.head_dim
    pairs = s * s if eager else s * (s + 1) / 2
    assert lt.layer_attention_time_s(FLOPS_ONLY, m, b, s, e, eager) == pytest.approx(4 * d * a * b * pairs)
    if not eager:  # fused: the bench row's count exactly
        assert lt.layer_attention_time_s(FLOPS_ONLY, m, b, s, e, 0) == opc.attention(b, s, a, g, d, e).flops
    io = e * b * s * d * (2 * a + 2 * g)
    scores = eager * 4 * b * a * s * s * e
    assert lt.layer_attention_time_s(BYTES_ONLY, m, b, s, e, eager) == pytest.approx(io + scores)


def test_elementwise_and_head_bytes(m):
    T, e, tp = 128, 2, 2
    h, f, q, kv, d, V = m.hidden_size, m.intermediate_size, m.q_dim, m.kv_dim, m.head_dim, m.vocab_size
    norms = 2 * e * (2 * T * h + h)
    adds = 2 * 3 * e * T * h
    rope = e * (2 * T * (q + kv) + 2 * T * d)
    swiglu = 3 * e * T * f
    assert lt.layer_elementwise_time_s(BYTES_ONLY, m, T, e, tp) == pytest.approx(norms + adds + (rope + swiglu) / tp)
    head = e * (T * h + h * V + T * V)
    loss_fwd, loss_bwd = 4 * T * V + 8 * T + 4, 8 * T * V + 8 * T  # fp32 cross-entropy, each pass
    moved = e * (T * h + T * V)  # a CPU moves the head's input and logits apart from the kernel
    assert lt.head_forward_time_s(BYTES_ONLY, m, T, e) == pytest.approx(head + loss_fwd + moved)
    assert lt.head_forward_time_s(BYTES_ONLY, m, T, e, with_loss=0) == pytest.approx(head + moved)
    # the backward: dlogits once, then dX and dW (dX alone under LoRA), never the forward loss
    assert lt.head_backward_time_s(BYTES_ONLY, m, T, e) == pytest.approx(loss_bwd + 2 * (head + moved))
    assert lt.head_backward_time_s(BYTES_ONLY, m, T, e, gemms=1) == pytest.approx(loss_bwd + head + moved)
