"""perfmodel.moe's formulas against their closed forms, and the MoE / MLA / sliding-window
specs through flops, kvcache and weights (no torch)."""
import numpy as np
import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel import kvcache, moe
from llmdissect.perfmodel.layertime import layer_gemm_shapes, model_param_tensors, op_policy_gemms
from llmdissect.perfmodel.weights import lora_params, model_weight_bytes
from llmdissect.specs import get_model


def test_expected_distinct_experts_closed_form():
    assert moe.expected_distinct_experts(8, 2, 1) == pytest.approx(2)  # one token: its k
    assert moe.expected_distinct_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))  # 3.5
    assert moe.expected_distinct_experts(256, 8, 10_000) == pytest.approx(256)
    b = np.array([1, 4, 64])
    assert np.all(np.diff(moe.expected_distinct_experts(128, 8, b)) > 0)


def test_expected_distinct_experts_by_enumeration():
    # E = 4, k = 2, b = 2: the 6 x 6 equally likely pairs of expert sets
    from itertools import combinations

    sets = list(combinations(range(4), 2))
    mean = sum(len(set(a) | set(b)) for a in sets for b in sets) / len(sets) ** 2
    assert moe.expected_distinct_experts(4, 2, 2) == pytest.approx(mean)


def test_moe_flops_are_twice_the_active_matmul_parameters():
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b"):
        m = get_model(name)
        assert moe.moe_layer_flops_fwd(m) == 2 * m.params_moe_layer_active
        h, f = m.hidden_size, m.expert_intermediate_size
        assert moe.routed_experts_flops_fwd(m) == m.experts_per_token * 6 * h * f
    m = get_model("deepseek-v3")
    assert moe.shared_experts_flops_fwd(m) == 6 * 7168 * 2048
    assert moe.router_flops_fwd(m) == 2 * 7168 * 256


def test_model_flops_follow_active_parameters():
    m = get_model("mixtral-8x7b")
    assert fl.model_flops_per_token(m, 0) == 6 * m.params_matmul
    assert m.params_matmul < 0.3 * m.params_matmul_total  # 2 of 8 experts
    assert fl.layer_matmul_flops_fwd(m) * m.num_layers + 2 * m.params_head == 2 * m.params_matmul


def test_mla_projection_flops_closed_form():
    m = get_model("deepseek-v3")
    h, a = 7168, 128
    expected = 2 * (h * 1536 + 1536 * a * 192 + h * (512 + 64) + 512 * a * (128 + 128) + a * 128 * h)
    assert moe.mla_projection_flops_fwd(m) == expected


def test_mla_absorbed_decode_flops_closed_form():
    m = get_model("deepseek-v3")
    h, a, c = 7168, 128, 1000
    per_token = 2 * (h * 1536 + 1536 * a * 192) + 2 * a * 128 * 512 + 2 * h * 576 + 2 * a * 512 * 128 + 2 * a * 128 * h
    assert moe.mla_absorbed_decode_flops(m, c) == per_token + 2 * a * c * 576 + 2 * a * c * 512


def test_mla_expansion_closed_form():
    m = get_model("tiny-mla")  # r_kv 64, 4 heads, nope 32, rope 16, v 32
    assert moe.mla_expansion_flops(m, 100) == 2 * 100 * 64 * 4 * (32 + 32)
    assert moe.mla_expanded_kv_bytes(m, 100, 4) == 2 * 100 * 4 * (48 + 32) * 4
    assert moe.mla_expansion_flops(get_model("tiny-moe"), 100) == 0


def test_mla_kv_cache_is_the_latent():
    m = get_model("deepseek-v3")
    assert kvcache.kv_bytes_per_token(m, 2) == 61 * (512 + 64) * 2  # 70,272 bytes per token in bf16
    assert kvcache.kv_cache_bytes(m, 1, 100, 2, tp=8) == 100 * 61 * 576 * 2  # one latent on every rank


def test_sliding_window_kv_cache():
    m = get_model("gemma3-12b")  # 8 global, 40 local layers of window 1024; 2 x 8 x 256 values each
    per_position_layer = 2 * 8 * 256
    assert kvcache.kv_cache_bytes(m, 1, 500, 2) == 48 * 500 * per_position_layer * 2
    assert kvcache.kv_cache_bytes(m, 1, 8192, 2) == (8 * 8192 + 40 * 1024) * per_position_layer * 2
    assert moe.cached_positions(m, np.array([500, 8192])).tolist() == [48 * 500, 8 * 8192 + 40 * 1024]


def test_all_to_all_bytes_closed_form():
    from types import SimpleNamespace

    m = get_model("mixtral-8x7b")
    assert moe.all_to_all_bytes_per_layer(m, 4096, 1, 2) == 0
    assert moe.all_to_all_bytes_per_layer(m, 4096, 8, 2) == 2 * 4096 * 2 * 4096 * 2 * 7 / 8
    net = SimpleNamespace(base_s=1e-5, alpha_s=1e-6, bandwidth_bytes_per_s=1e11, efficiency=0.5)
    call = 1e-5 + 7e-6 + 4096 * 2 * 4096 * 2 * 7 / 8 / 5e10
    assert moe.all_to_all_time_s(net, m, 4096, 8, 2, 32, 4) == pytest.approx(32 * 4 * call)
    assert moe.all_to_all_time_s(net, m, 4096, 1, 2, 32, 4) == 0


def test_decode_reads_the_reached_experts():
    m = get_model("mixtral-8x7b")
    assert moe.decode_weight_fraction(get_model("llama3-8b"), 4) == 1
    one = moe.decode_weight_fraction(m, 1)
    # batch 1: attention and router, 2 of 8 experts: the active share of the layers' weights
    layers_active = m.params_matmul - m.params_head
    assert one == pytest.approx(layers_active / (m.params_matmul_total - m.params_head))
    assert moe.decode_weight_fraction(m, 1000) == pytest.approx(1)
    bytes_1 = moe.decode_expert_bytes(m, 1, 2)
    assert bytes_1 == pytest.approx(32 * 2 * m.params_expert * 2)


def test_check_expert_parallel():
    m = get_model("mixtral-8x7b")
    moe.check_expert_parallel(m, 8, 16)
    with pytest.raises(UserError, match="does not divide the 8 experts"):
        moe.check_expert_parallel(m, 3, 12)
    with pytest.raises(UserError, match="dense"):
        moe.check_expert_parallel(get_model("llama3-8b"), 2, 8)
    with pytest.raises(UserError, match="data-parallel ranks"):
        moe.check_expert_parallel(m, 4, 6)


@pytest.mark.parametrize("name", ["deepseek-v3", "tiny-mla", "qwen3-30b-a3b", "gpt-oss-20b", "gemma3-12b"])
def test_weights_and_tensors_add_up(name):
    m = get_model(name)
    assert model_weight_bytes(m, "none", 2) == 2 * m.params
    assert sum(n * el for n, el in model_param_tensors(m)) == pytest.approx(m.params, rel=0.002)
    saved, redone = op_policy_gemms(m)
    assert len(saved) + len(redone) == len(layer_gemm_shapes(m))
    assert sum(1 for *_, row in saved + redone if row) == 2  # o and down


def test_lora_targets_of_new_families():
    assert lora_params(get_model("tiny-mla"), 8) > 0  # MLA's five projections by default
    with pytest.raises(UserError, match="choose from"):
        lora_params(get_model("tiny-moe"), 8, ("q_proj", "gate_proj"))


def test_expert_parallel_splits_experts_and_adds_all_to_all():
    from llmdissect.perfmodel.request import build_estimate

    one = build_estimate("pretrain", {"model": "mixtral-8x7b", "hardware": "8xh100", "zero": 3})
    eight = build_estimate("pretrain", {"model": "mixtral-8x7b", "hardware": "8xh100", "zero": 3, "ep": 8})
    # ZeRO-3 over 8 ranks already keeps 1/8 of every parameter; with ep 8 each expert lives on
    # one rank, which no other rank can share it with (expert data parallelism of 8 / 8 = 1):
    # the same bytes. Under DDP the experts' split is all the saving there is.
    assert eight.metrics["memory"]["params_bytes"] == pytest.approx(one.metrics["memory"]["params_bytes"])
    ddp = {"model": "mixtral-8x7b", "hardware": "8xh100", "zero": 0}
    ddp1, ddp8 = build_estimate("pretrain", ddp), build_estimate("pretrain", {**ddp, "ep": 8})
    m = get_model("mixtral-8x7b")
    routed = m.moe_layers * m.num_experts * m.params_expert
    saved = ddp1.metrics["memory"]["params_bytes"] - ddp8.metrics["memory"]["params_bytes"]
    assert saved == pytest.approx(routed * 7 / 8 * 2, rel=1e-9)  # 7/8 of the experts' bf16 weights
    # the experts' gradients are no longer reduced over the data-parallel ranks; all-to-alls come instead
    assert eight.metrics["comm_total_s"] < one.metrics["comm_total_s"]
    assert eight.metrics["model_flops_per_token"] == one.metrics["model_flops_per_token"]
    with pytest.raises(UserError, match="does not apply"):
        build_estimate("infer", {"model": "mixtral-8x7b", "hardware": "8xh100", "ep": 2})


def test_lora_targets_resolve_the_same_for_bench_and_estimate():
    from llmdissect.perfmodel.weights import resolve_lora_targets

    mla = get_model("tiny-mla")
    assert resolve_lora_targets(mla, ("q_proj", "k_proj", "v_proj", "o_proj")) == (
        "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
    assert lora_params(mla, 8) == 53_760  # bench finetune --model tiny-mla --lora-rank 8 counts these
    assert "gate_proj" not in resolve_lora_targets(get_model("tiny-moe"), ("q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"))


def test_routing_activation_bytes_closed_form():
    m = get_model("mixtral-8x7b")
    assert moe.routing_activation_bytes(m, 2, 1024, 2) == 2 * 1024 * (4 * 8 + 2 * 2 * 4096 * 2)
    assert moe.routing_activation_bytes(get_model("llama3-8b"), 2, 1024, 2) == 0


def test_lora_on_experts_closed_form_and_all_leaves_them_out():
    from llmdissect.perfmodel.weights import lora_params, resolve_lora_targets

    m = get_model("tiny-moe")  # 4 MoE layers, 8 experts of width 256, hidden 256
    h, fe, E, r = 256, 256, 8, 8
    assert lora_params(m, r, ("experts",)) == 4 * E * r * ((h + 2 * fe) + (fe + h))
    assert "experts" not in resolve_lora_targets(m, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                     "down_proj"))
    with pytest.raises(UserError, match="unknown LoRA target"):
        lora_params(get_model("llama2-7b"), 8, ("experts",))  # a dense model has none


def test_expert_adapter_cost_is_the_merged_delta():
    from llmdissect.perfmodel import op_costs as opc

    c = opc.lora_expert_adapter(8, 512, 256, 4, 2, "fwd")
    assert c.flops == 2 * 8 * 512 * 256 * 4  # B_e A_e for every expert, whatever the tokens
    assert c.bytes == 2 * (4 * 8 * 512 * 256 + 8 * 4 * (512 + 256))
    assert opc.lora_expert_adapter(8, 512, 256, 4, 2, "bwd").flops == 2 * c.flops


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-mla", "deepseek-v3"])
def test_moe_mlp_gemms_are_the_dense_equivalent_work_split_per_expert(name):
    from llmdissect.perfmodel.layertime import layer_gemm_shapes, moe_mlp_gemms

    m = get_model(name)
    shapes = layer_gemm_shapes(m)
    (k, n), (dk, dn) = shapes[-2], shapes[-1]
    for tokens in (1, 7, 512):
        for kk, nn, down in ((k, n, False), (dk, dn, True)):
            pieces = moe_mlp_gemms(m, tokens, kk, nn, down)
            assert sum(c * r * a * b for c, r, a, b in pieces) == pytest.approx(tokens * kk * nn)
        reached, rows = pieces[0][0], pieces[0][1]
        assert reached * rows == pytest.approx(tokens * m.experts_per_token)  # every routed copy, once
    assert moe_mlp_gemms(m, 1, k, n, False)[0][0] == pytest.approx(m.experts_per_token)  # one token: its k


def test_small_expert_gemms_run_at_their_own_lower_efficiency():
    from llmdissect.perfmodel import op_costs as opc
    from llmdissect.perfmodel.layertime import layer_gemm_shapes, layer_gemm_time_s
    from llmdissect.perfmodel.roofline import Ceilings

    m = get_model("tiny-moe")
    curve = [(1e5, 0.05), (1e9, 0.8)]  # small GEMMs reach less of the peak (bench ops' curve)
    c = Ceilings(1e12, 1e30, {"gemm": 0.8, "attention": 1, "memory": 1}, gemm_efficiency_by_flops=curve)
    flat = Ceilings(1e12, 1e30, {"gemm": 0.8, "attention": 1, "memory": 1})
    flops = sum(opc.linear_flops(256, k, n) for k, n in layer_gemm_shapes(m))
    # one efficiency for every size: the split into experts changes nothing
    assert layer_gemm_time_s(flat, m, 256, 4, 0) == pytest.approx(flops / (1e12 * 0.8))
    # by size: 8 expert GEMMs of 64 rows cost more than one of 256 rows and 2 experts' width
    from llmdissect.perfmodel.roofline import gemm_time_s
    as_dense = sum(gemm_time_s(c, opc.linear_flops(256, k, n), 0, (256, k, n)) for k, n in layer_gemm_shapes(m))
    assert layer_gemm_time_s(c, m, 256, 4, 0) > 1.2 * as_dense


def test_moe_routing_bytes_closed_form():
    from llmdissect.perfmodel import op_costs as opc

    T, k, h, E, e = 256, 2, 256, 8, 4
    fwd = opc.moe_routing(T, k, h, E, e)
    # fp32 logits read and written; each routed copy gathered (2), combined (3), weighted (2)
    assert fwd.bytes == 8 * T * E + 7 * e * T * k * h
    assert opc.moe_routing(T, k, h, E, e, "bwd").bytes == 2 * fwd.bytes
