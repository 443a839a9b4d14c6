"""Model states vs the ZeRO paper's closed forms, FLOPs vs PaLM's formula (no torch)."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel import states
from llmdissect.specs import get_model, resolve_platform

PSI = 7_000_000_000


@pytest.mark.parametrize("n", [1, 4, 8, 64])
def test_zero_stages_match_the_papers_closed_forms(n):
    # arXiv 1910.02054, figure 1: mixed-precision Adam, K = 12
    expected = {0: 16 * PSI, 1: 4 * PSI + 12 * PSI / n, 2: 2 * PSI + 14 * PSI / n, 3: 16 * PSI / n}
    for stage, want in expected.items():
        assert states.model_state_bytes(PSI, 2, stage, n) == pytest.approx(want, rel=1e-12)


def test_zero_paper_example_7_5b_on_64_gpus():
    # The paper's own figure-1 numbers: 7.5B parameters, N = 64 -> 120, 31.4, 16.6, 1.88 GB
    psi = 7.5e9
    got = [states.model_state_bytes(psi, 2, s, 64) / 1e9 for s in range(4)]
    assert got == pytest.approx([120, 31.4, 16.6, 1.88], rel=0.01)


def test_fp32_adam_is_also_16_bytes_and_sgd_is_less():
    assert states.model_state_bytes(PSI, 4, 0, 1) == 16 * PSI
    assert states.model_state_bytes(PSI, 4, 0, 1, "sgd") == 12 * PSI


def test_offload_moves_optimizer_and_gradients_to_the_host():
    p, g, o = states.offloaded_device_bytes(PSI, 2, 2, 8, 1)
    assert (p, g, o) == (2 * PSI, 0, 0)
    assert states.host_bytes_per_device(PSI, 2, 2, 8, 1) == pytest.approx(14 * PSI / 8)
    p, g, o = states.offloaded_device_bytes(PSI, 2, 3, 8, 2, working_params=1000)
    assert (p, g, o) == (2000, 0, 0)
    assert states.host_bytes_per_device(PSI, 2, 3, 8, 2) == pytest.approx(16 * PSI / 8)


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "llama3-8b", "tiny-llama"])
@pytest.mark.parametrize("seq", [512, 4096])
def test_model_flops_are_palms_6n_plus_12_l_d_s(name, seq):
    m = get_model(name)
    palm = 6 * m.params_matmul + 12 * m.num_layers * m.num_heads * m.head_dim * seq
    assert fl.model_flops_per_token(m, seq) == palm
    # and the per-operator forward FLOPs add up to a third of it (fwd 1x, bwd 2x)
    per_op = m.num_layers * (fl.qkv_flops_fwd(m) + fl.out_proj_flops_fwd(m) + fl.mlp_flops_fwd(m)
                             + fl.scores_flops_fwd(m, seq) + fl.attn_v_flops_fwd(m, seq)) + fl.head_flops_fwd(m)
    assert 3 * per_op == palm


def test_llama2_7b_published_scale():
    # ~6.5 B matmul parameters: 6N ~ 39.6 GFLOP/token, plus 12*32*4096*4096 at s = 4096
    m = get_model("llama2-7b")
    assert fl.model_flops_per_token(m, 4096) / 1e9 == pytest.approx(39.65 + 6.44, rel=0.01)


def test_lora_and_recompute_flop_conventions():
    m = get_model("llama2-7b")
    n, att = m.params_matmul, 12 * m.num_layers * m.q_dim * 2048
    assert fl.model_flops_per_token(m, 2048, lora_params=1000) == 4 * n + 6 * 1000 + att
    full = fl.hardware_flops_per_token(m, 2048, 2)
    head = 2 * m.params_head  # the head's forward is not recomputed
    assert full == 8 * n - head + 16 * m.num_layers * m.q_dim * 2048
    assert fl.hardware_flops_per_token(m, 2048, 1) == 6 * n + 16 * m.num_layers * m.q_dim * 2048
    assert fl.hardware_flops_per_token(m, 2048, 0) == fl.model_flops_per_token(m, 2048)


def test_op_recompute_redoes_the_matmuls_it_did_not_save():
    # torchtitan's per-operator policy recomputes k, o and up (the 2nd, 4th and 6th matmul of a
    # Llama layer): 2 h (d_kv + d_q + f) FLOPs per token and layer, and no attention core
    m = get_model("llama3-8b")
    h = m.hidden_size
    want = m.num_layers * 2 * h * (m.kv_dim + m.q_dim + m.intermediate_size)
    assert fl.recompute_flops_per_token(m, 8192, 3) == want


@pytest.mark.parametrize("n", [1, 8])
def test_pure_bf16_keeps_no_master_and_16_bit_moments(n):
    # torchtune's dtype=bf16: weight 2 + gradient 2 + m and v in bf16 4 = 8 bytes per parameter
    expected = {0: 8 * PSI, 1: 4 * PSI + 4 * PSI / n, 2: 2 * PSI + 6 * PSI / n, 3: 8 * PSI / n}
    for stage, want in expected.items():
        assert states.model_state_bytes(PSI, 2, stage, n, pure=1) == pytest.approx(want, rel=1e-12)
    assert states.optimizer_bytes_per_param(4, "adamw", pure=1) == 8  # fp32 is its own master already
    assert states.optimizer_bytes_per_param(2, "adamw-8bit", pure=1) == 2


def test_pure_bf16_optimizer_step_moves_half_the_bytes():
    from llmdissect.perfmodel import op_costs as opc

    assert opc.optimizer_step_bytes_per_param(2, "adamw-fused", pure=1) == 14  # read p g m v, write p m v
    assert opc.optimizer_step_traffic_bytes_per_param(2, "adamw", pure=1) == 20 * 2  # unfused passes, 2 bytes


def test_int4_weights_take_a_bf16_scale_and_zero_point_per_group():
    from llmdissect.perfmodel import weights as wt

    o, i = 4096, 4096
    assert wt.linear_weight_bytes(o, i, "int4-weight", 2) == o * i // 2 + o * (i // 128) * 4  # torchao's 128
    assert wt.linear_weight_bytes(o, i, "int4-weight", 2, group=32) == o * i // 2 + o * (i // 32) * 4
    assert wt.linear_weight_bytes(o, i, "int4-weight", 2, group=32) / (o * i) == 0.625
    m = get_model("llama2-7b")
    g32, g128 = wt.model_weight_bytes(m, "int4-weight", 2, 32), wt.model_weight_bytes(m, "int4-weight", 2)
    assert g32 > g128 and wt.layer_read_bytes(m, "int4-weight", 2, 32) > wt.layer_read_bytes(m, "int4-weight", 2)
    assert wt.model_weight_bytes(m, "int8", 2, 32) == wt.model_weight_bytes(m, "int8", 2)  # int4's alone


def test_the_group_size_is_int4s_and_one_torchao_takes():
    from llmdissect.errors import UserError
    from llmdissect.perfmodel.config import InferSetup
    from llmdissect.perfmodel.weights import check_group_size
    from llmdissect.perfmodel.weights import group_size_key as wt_group_key

    assert check_group_size("int4-weight", 0) == 128 and check_group_size("int4-weight", 32) == 32
    assert check_group_size("none", 0) == 0
    assert wt_group_key(128) == 0 and wt_group_key(0) == 0 and wt_group_key(32) == 32  # what a config names
    with pytest.raises(UserError, match="int4-weight takes"):
        check_group_size("int4-weight", 48)
    with pytest.raises(UserError, match="applies to --quant int4-weight"):
        check_group_size("nf4", 64)
    m, plat = get_model("llama2-7b"), resolve_platform("a100")
    # a departure from torchao's default is a config key (so that validate pairs like with like)
    assert InferSetup(m, plat, quant="int4-weight", group_size=32).config()["group_size"] == 32
    assert "group_size" not in InferSetup(m, plat, quant="int4-weight").config()
    assert "group_size" not in InferSetup(m, plat, quant="int4-weight", group_size=128).config()


def test_an_estimate_request_takes_the_group_size_for_inference_only():
    from llmdissect.errors import UserError
    from llmdissect.perfmodel.request import build_estimate, estimate_request

    def decode(**kw):
        return build_estimate("infer", dict(model="llama2-7b", hardware="a100", quant="int4-weight", batch=1,
                                            input_len=5, output_len=200, **kw), None).metrics["decode_tokens_per_s"]
    assert decode(group_size=32) < decode()  # a quarter more bytes a weight to stream at batch 1
    with pytest.raises(UserError, match="does not apply to `estimate pretrain`"):
        estimate_request("pretrain", model="llama2-7b", hardware="a100", group_size=32)
    with pytest.raises(UserError, match="must be a positive integer"):
        estimate_request("infer", model="llama2-7b", hardware="a100", group_size=0)
