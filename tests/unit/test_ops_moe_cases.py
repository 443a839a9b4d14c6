"""`bench ops` on a MoE model: the router and the routed experts at the token counts uniform
routing gives them, with their FLOPs from the one operator table; run for real, small."""
import pytest

from llmdissect.micro import ops_cases as oc
from llmdissect.micro.ops_config import OpsConfig
from llmdissect.specs import get_model


def test_routed_tokens_per_expert_is_t_k_over_e():
    spec = get_model("tiny-moe")  # 8 experts, top-2
    assert oc.routed_tokens_per_expert(512, spec) == 128
    assert oc.routed_tokens_per_expert(1, spec) == 1  # never fewer than one


@pytest.mark.parametrize("passes", ["fwd", "bwd"])
def test_moe_cases_cost_and_run(passes):
    import torch

    spec = get_model("tiny-mla")  # 8 routed experts of width 128, top-2, one shared expert
    T, h, E, fe = 64, spec.hidden_size, spec.num_experts, spec.expert_intermediate_size
    listed = oc.moe_cases(lambda: oc.Maker("cpu", torch.float32, 0), spec, T, 4, passes)
    cases = {c.op: c for c in listed[::-1]}  # the first of each name: routed experts at all T tokens
    assert set(cases) == {"router", "routed experts", "shared gate_up", "shared down"}
    # the routed experts also at T / 8 tokens: the grouped GEMMs' efficiency by rows per expert
    assert [c.shape for c in listed if c.op == "routed experts"] == [f"8 x [16,{h}] mlp {fe}", f"8 x [2,{h}] mlp {fe}"]
    assert all(c.cls == "experts" for c in listed if c.op == "routed experts")
    Te = T * 2 // E
    times = 2 if passes == "bwd" else 1
    # E experts, each 2 Te h 2I + 2 Te fe h FLOPs for its two GEMMs and 5 Te fe for SiLU x gate
    assert cases["routed experts"].cost.flops == times * E * (2 * Te * h * 2 * fe + 2 * Te * fe * h + 5 * Te * fe)
    assert cases["router"].cost.flops == times * 2 * T * h * E
    for c in listed:
        out = c.make()()
        assert out is not None


def test_bench_ops_of_a_moe_model_has_its_rows():
    from llmdissect.micro.ops_child import build_cases

    cfg = OpsConfig(model="tiny-moe", tokens=64, passes="fwd", quant=False, device="cpu")
    names = [c.op for c in build_cases(cfg)[0]]
    assert "router" in names and "routed experts" in names
    dense = [c.op for c in build_cases(cfg.model_copy(update={"model": "debug-llama"}))[0]]
    assert "router" not in dense
