"""The fixed costs a roofline cannot see (issue 16): per operator, per forward, per generate
step, per collective call; and GEMM efficiency by size. Closed forms, no timing."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import comm
from llmdissect.perfmodel import layertime as lt
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import InferSetup, TrainSetup
from llmdissect.perfmodel.estimate import estimate_infer, estimate_train
from llmdissect.perfmodel.roofline import Ceilings, gemm_efficiency
from llmdissect.specs import get_model, resolve_platform

# ceilings so high that every roofline time vanishes: what is left is the fixed costs
HUGE = {"peak_flops_per_s": {"fp32": 1e30}, "memory_bandwidth_bytes_per_s": 1e30,
        "op_fixed_s": 50e-6, "forward_fixed_s": 1e-3, "generate_step_s": 0.5e-3, "generate_call_s": 2e-3}


def test_a_layer_pays_a_fixed_cost_per_operator_of_the_table():
    c = Ceilings(1e30, 1e30, {"gemm": 1, "attention": 1, "memory": 1}, op_fixed_s=50e-6)
    assert len(opc.LAYER_FORWARD_OPS) == 14
    m = get_model("tiny-llama")
    assert opc.layer_forward_ops(m) == 14
    assert lt.layer_forward_time_s(c, m, 1, 1, 4, 0, 0) == pytest.approx(14 * 50e-6)


def test_another_family_pays_in_proportion_to_its_operators():
    # Qwen3-MoE: 100 aten operators a layer against Llama's 53 (op_costs.LAYER_ATEN_OPS)
    c = Ceilings(1e30, 1e30, {"gemm": 1, "attention": 1, "memory": 1}, op_fixed_s=50e-6)
    assert opc.layer_forward_ops(get_model("tiny-moe")) == pytest.approx(14 * 100 / 53)
    assert lt.layer_forward_time_s(c, get_model("tiny-moe"), 1, 1, 4, 0, 0) == pytest.approx(14 * 100 / 53 * 50e-6)
    # DeepSeek-V3: 3 dense first layers of 87, 58 MoE layers of 141, the mean of the two
    ds = get_model("deepseek-v3")
    assert opc.layer_forward_ops(ds) == pytest.approx(14 * (3 * 87 + 58 * 141) / 61 / 53)
    assert opc.layer_forward_ops(get_model("gemma3-12b")) == 14  # not counted: taken as Llama


def test_tpot_at_vanishing_rooflines_is_the_sum_of_the_fixed_costs():
    m = get_model("tiny-llama")
    plat = resolve_platform("cpu")
    est = estimate_infer(InferSetup(model=m, platform=plat, batch=1, input_len=16, output_len=8, dtype="fp32"),
                         machine_for(plat, "fp32", {"cpu": HUGE}))
    t = est.metrics["time"]
    # every layer's 14 operators, the forward outside its layers, generate's own step; the
    # first token pays generate's set-up (and its pick) instead of a step
    assert t["tpot_s"] == pytest.approx(6 * 14 * 50e-6 + 1e-3 + 0.5e-3, rel=1e-6)
    assert t["ttft_s"] == pytest.approx(6 * 14 * 50e-6 + 1e-3 + 2e-3, rel=1e-6)


def test_inference_layers_pay_their_cache_update_and_training_layers_do_not():
    m = get_model("tiny-llama")
    plat = resolve_platform("cpu")
    mach = machine_for(plat, "fp32", {"cpu": {**HUGE, "cache_update_s": 40e-6}})
    t = estimate_infer(InferSetup(model=m, platform=plat, batch=1, input_len=16, output_len=8, dtype="fp32"),
                       mach).metrics["time"]
    # each of the 6 layers updates its KV cache once per forward, the prompt's and each step's
    assert t["tpot_s"] == pytest.approx(6 * (14 * 50e-6 + 40e-6) + 1e-3 + 0.5e-3, rel=1e-6)
    assert t["ttft_s"] == pytest.approx(6 * (14 * 50e-6 + 40e-6) + 1e-3 + 2e-3, rel=1e-6)
    train = estimate_train(TrainSetup(kind="pretrain", model=m, platform=plat, micro_batch=1, seq=16, dtype="fp32"),
                           mach).metrics["time"]
    assert train["forward_s"] == pytest.approx(6 * 14 * 50e-6 + 1e-3 + 2 * len(opc.LOSS_OPS) * 50e-6, rel=1e-6)


def test_on_a_gpu_the_cache_update_hides_behind_long_kernels():
    c = Ceilings(1e30, 1e30, {"gemm": 1, "attention": 1, "memory": 1}, op_fixed_s=5e-6, cache_update_s=20e-6,
                 asynchronous=True)
    assert lt.launch_bound(c, 1e-3, 14, c.cache_update_s) == 1e-3  # 90 us of launches under 1 ms of kernels
    assert lt.launch_bound(c, 10e-6, 14, c.cache_update_s) == pytest.approx(14 * 5e-6 + 20e-6)


def test_backward_pays_each_operators_fixed_cost_once():
    m = get_model("tiny-llama")
    plat = resolve_platform("cpu")
    est = estimate_train(TrainSetup(kind="pretrain", model=m, platform=plat, micro_batch=1, seq=16, dtype="fp32"),
                         machine_for(plat, "fp32", {"cpu": HUGE}))
    t = est.metrics["time"]
    loss = 2 * len(opc.LOSS_OPS) * 50e-6
    assert t["forward_s"] == pytest.approx(6 * 14 * 50e-6 + 1e-3 + loss, rel=1e-6)
    assert t["backward_s"] == pytest.approx(6 * 14 * 50e-6 + 2 * (1e-3 + loss), rel=1e-6)


def test_gpus_default_to_a_published_kernel_launch_cost():
    mach = machine_for(resolve_platform("h100"), "bf16")
    assert mach.ceilings.op_fixed_s == 3.8e-6
    assert mach.ceilings.forward_fixed_s == pytest.approx(3 * 3.8e-6)
    assert "launch" in mach.sources["fixed_costs"]
    cpu = machine_for(resolve_platform("cpu"), "fp32", {"cpu": {"peak_flops_per_s": {"fp32": 1e11},
                                                                 "memory_bandwidth_bytes_per_s": 1e10}})
    assert cpu.ceilings.op_fixed_s == 0 and "not measured" in cpu.sources["fixed_costs"]


def test_gemm_efficiency_follows_the_measured_curve_in_log_flops():
    c = Ceilings(1e12, 1e11, {"gemm": 0.7, "attention": 0.5, "memory": 0.8},
                 gemm_efficiency_by_flops=((1e6, 0.2), (1e8, 0.6)))
    assert gemm_efficiency(c, 1e5) == 0.2  # flat below the smallest measured GEMM
    assert gemm_efficiency(c, 1e7) == pytest.approx(0.4)  # half-way in log10: 6 -> 8
    assert gemm_efficiency(c, 1e9) == 0.6  # flat above the largest
    assert gemm_efficiency(c) == 0.7  # no size: the class's efficiency


def test_fsdp_pays_a_collective_call_per_wrapped_layer():
    net = comm.Network(1e9, 0.0, 1.0, base_s=1e-4)
    one = comm.collective_time_s(net, "all_gather", 1e6, 2)
    per_layer = comm.collective_time_s(net, "all_gather", 1e6, 2, calls=7)
    assert per_layer - one == pytest.approx(6 * 1e-4)
    m = get_model("tiny-llama")
    setup = TrainSetup(kind="pretrain", model=m, platform=resolve_platform("cpu", 2), zero=3, dtype="fp32",
                       seq=16)
    assert setup.engine == "fsdp" and setup.sharded_calls == m.num_layers + 1


def test_on_a_cpu_no_collective_hides_behind_compute():
    from llmdissect.perfmodel.defaults import assumptions_for

    assert assumptions_for("cpu")["overlap_fraction"] == 0.0
    assert assumptions_for("gpu")["overlap_fraction"] == 0.5


def _optimizer_s(profile, nproc=1, zero=0, kind="pretrain", engine="auto", **kw):
    setup = TrainSetup(kind=kind, model=get_model("tiny-llama"), platform=resolve_platform("cpu", nproc),
                       zero=zero, dtype="fp32", seq=64, engine_name=engine, **kw)
    return estimate_train(setup, machine_for(setup.platform, "fp32", profile)).metrics["time"]["optimizer_s"]


@pytest.mark.parametrize("nproc,zero,engine,kind,kw,tensors", [
    (1, 0, "auto", "pretrain", {}, 6 * 9 + 3),  # 7 projections and 2 norms a layer; embedding, norm, head
    (2, 1, "ddp", "pretrain", {}, (6 * 9 + 3) / 2),  # ZeroRedundancyOptimizer: whole tensors, half each
    (2, 2, "deepspeed", "pretrain", {}, 1),  # one flat partition
    (1, 0, "auto", "finetune", {"lora_rank": 8, "lora_targets": ("q_proj", "v_proj")},
     2 * 2 * 6),  # A and B of 2 projections in 6 layers
])
def test_the_optimizer_pays_its_per_tensor_cost_once_per_tensor_it_steps(nproc, zero, engine, kind, kw, tensors):
    from llmdissect.perfmodel.trainmodel import optimizer_tensors

    m = get_model("tiny-llama")
    assert sum(c for c, _ in lt.model_param_tensors(m)) == 6 * 9 + 3
    with_cost = _optimizer_s({"cpu": {**HUGE, "optimizer_tensor_s": 20e-6}}, nproc, zero, kind, engine, **kw)
    without = _optimizer_s({"cpu": HUGE}, nproc, zero, kind, engine, **kw)
    assert with_cost - without == pytest.approx(tensors * 20e-6)
    assert optimizer_tensors(m, 6 * 9 + 3, 1, 0, 0, 0, 1, 1) == 2 * 4 * 6  # LoRA, none resolved: bench finetune's 4


def test_adamw_moves_its_cached_passes_at_the_measured_rate_and_the_rest_at_the_copy_bandwidth():
    from llmdissect.perfmodel.trainmodel import optimizer_step_s

    bw, cached, cache = 30e9, 90e9, 32 * 2**20
    eff = {"gemm": 1, "attention": 1, "memory": 0.4}
    c = Ceilings(1e12, bw, eff, cache_bytes=cache, optimizer_cached_bytes_per_s=cached)
    small, big = 2**18, 2**22  # working sets 6 x 4 x n: 6 MiB fits, 96 MiB spills
    # a tensor that fits: 28 bytes an element from memory, the other 52 of the 80 in the cache
    assert optimizer_step_s(c, 4, "adamw", [(1, small)]) == pytest.approx(28 / bw + 52 / cached)
    # one that spills: all 80 at the copy bandwidth (not at the element-wise 0.4 of it)
    assert optimizer_step_s(c, 4, "adamw", [(1, big)]) == pytest.approx(80 / bw)
    mixed = optimizer_step_s(c, 4, "adamw", [(3, small), (1, big)])
    share = big / (3 * small + big)
    assert mixed == pytest.approx(share * 80 / bw + (1 - share) * (28 / bw + 52 / cached))
    # sharded over 16 ranks, the big tensor's share fits too
    assert optimizer_step_s(c, 4, "adamw", [(1, big)], shard=16) == pytest.approx(28 / bw + 52 / cached)
    # a fused kernel and SGD move their fewest bytes once, at the copy bandwidth
    assert optimizer_step_s(c, 4, "adamw-fused", [(1, big)]) == pytest.approx(28 / bw)
    assert optimizer_step_s(c, 4, "sgd", [(1, big)]) == pytest.approx(20 / bw)


def test_without_a_measured_cached_rate_the_optimizer_streams_its_traffic_at_the_element_wise_rate():
    from llmdissect.perfmodel.trainmodel import optimizer_step_s

    c = Ceilings(1e12, 30e9, {"gemm": 1, "attention": 1, "memory": 0.4}, cache_bytes=32 * 2**20)
    tensors = [(3, 2**18), (1, 2**22)]
    for opt in ("adamw", "adamw-fused", "sgd"):  # a GPU, or a CPU not calibrated: as before
        traffic = opc.optimizer_step_traffic_bytes_per_param(4, opt, tensors, c.cache_bytes)
        assert optimizer_step_s(c, 4, opt, tensors) == pytest.approx(traffic / (0.4 * 30e9))


def test_the_cached_rate_reaches_the_estimate_from_the_profile_and_is_shared_between_processes():
    profile = {"cpu": {**HUGE, "optimizer_cached_bytes_per_s": 80e9}}
    one = machine_for(resolve_platform("cpu"), "fp32", profile).ceilings
    two = machine_for(resolve_platform("cpu", 2), "fp32", profile).ceilings
    assert one.optimizer_cached_bytes_per_s == 80e9
    assert two.optimizer_cached_bytes_per_s == 40e9  # two processes share one CPU's cores
    gpu = machine_for(resolve_platform("h100"), "bf16", {}).ceilings
    assert gpu.optimizer_cached_bytes_per_s == 0.0  # not measured: the element-wise rate


def test_the_cached_probe_is_a_quarter_of_the_cache_within_its_bounds():
    from llmdissect.micro.optimizer_rates import MAX_ELEMENTS, MIN_ELEMENTS, UNKNOWN_CACHE_BYTES, probe_elements

    assert probe_elements(32 * 2**20) == int(32 * 2**20 / 4 / (6 * 4))  # 349,525 elements, 8 MiB of 6 arrays
    assert probe_elements(None) == probe_elements(UNKNOWN_CACHE_BYTES)
    assert probe_elements(480 * 2**20) == MAX_ELEMENTS  # a VM reporting its host's cache
    assert probe_elements(64 * 2**10) == MIN_ELEMENTS


def test_cpu_adam_under_offload_runs_each_nodes_share_of_the_model_on_that_node():
    from llmdissect.perfmodel.trainmodel import host_optimizer_params

    p = 70e9
    assert host_optimizer_params(p, 1, 0) == p  # one GPU: the whole model on its host
    assert host_optimizer_params(p / 8, 8, 8) == p  # 8 ranks of one node: 8 partitions on one host
    assert host_optimizer_params(p / 8, 8, 0) == p  # one node, not catalogued as multi-node
    assert host_optimizer_params(p / 32, 32, 8) == p / 4  # 4 nodes: a quarter each, at once
    assert host_optimizer_params(p / 2 / 16, 32, 8) == p / 4  # tp 2 inside the node: the same share
