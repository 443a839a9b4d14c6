"""GPT-shaped models (GELU MLP of two matrices) for the published Megatron-LM, FlashAttention and
MPT points: counts and FLOPs against the closed forms of the papers that report them (no torch)."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import activations, layertime, weights
from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel import op_costs as opc
from llmdissect.specs.models import ModelSpec


def _gpt(h=12288, layers=96, heads=96, vocab=51200, **kw) -> ModelSpec:
    """GPT-3 175B's shapes (Brown et al., arXiv 2005.14165, table 2.1), f = 4h."""
    return ModelSpec(name="gpt", hidden_size=h, intermediate_size=4 * h, num_layers=layers, num_heads=heads,
                     num_kv_heads=heads, vocab_size=vocab, max_position_embeddings=2048, model_type="gpt", **kw)


def test_gpt_mlp_has_two_matrices_and_llama_three():
    m = _gpt()
    h = m.hidden_size
    assert m.params_mlp_per_layer == 8 * h * h
    assert fl.mlp_flops_fwd(m) == 16 * h * h
    assert set(weights.layer_linear_shapes(m)) == {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"}
    assert len(layertime.layer_gemm_shapes(m)) == 6
    llama = ModelSpec(name="l", hidden_size=h, intermediate_size=4 * h, num_layers=1, num_heads=96,
                      num_kv_heads=96, vocab_size=8, max_position_embeddings=8)
    assert llama.params_mlp_per_layer == 12 * h * h and len(layertime.layer_gemm_shapes(llama)) == 7


def test_gpt3_175b_has_its_published_parameter_count():
    # 12 l h^2 + V h (weights only; biases, LayerNorms and positions are under 0.1 %)
    m = _gpt(vocab=50257)
    assert m.params_matmul / 1e9 == pytest.approx(175.0, rel=0.005)


@pytest.mark.parametrize("seq", [2048, 4096])
def test_hardware_flops_equal_megatrons_closed_form(seq):
    # Narayanan et al., arXiv 2104.04473, eq. (3): with full recomputation a token costs
    # 96 l h^2 (1 + s / (6 h) + V / (16 l h)) FLOPs.
    m = _gpt()
    L, h, V = m.num_layers, m.hidden_size, m.vocab_size
    megatron = 96 * L * h * h * (1 + seq / (6 * h) + V / (16 * L * h))
    assert fl.hardware_flops_per_token(m, seq, level=2) == pytest.approx(megatron, rel=1e-12)


def test_gelu_costs_read_one_tensor_where_swiglu_reads_two():
    T, f, e = 64, 1024, 2
    assert opc.mlp_activation(T, f, e, gated=False).bytes == 2 * e * T * f
    assert opc.mlp_activation(T, f, e, gated=True).bytes == 3 * e * T * f
    assert opc.mlp_activation(T, f, e, gated=False, passes="bwd").flops == 2 * opc.GELU_FLOPS * T * f


def test_gpt_mlp_keeps_two_tensors_of_f_for_backward():
    # Korthikanti et al., arXiv 2205.05198, section 4.1: the MLP keeps 8 sbh + 8 sbh bytes at
    # f = 4h in 16-bit: the GELU's input and the second matmul's input (2 b s f e).
    m = _gpt(h=1024, layers=2, heads=16)
    b, s, e = 2, 128, 2
    assert activations.mlp_bytes(m, b, s, e) == 16 * s * b * m.hidden_size


def test_gpt_can_be_estimated_but_not_built():
    with pytest.raises(UserError, match="can be estimated, not built"):
        _gpt().hf_config_dict()
