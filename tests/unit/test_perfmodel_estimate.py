"""The composed estimate: advise's vectorized path agrees with the scalar one, physical
bounds hold, calibration overrides defaults, and the comm / roofline building blocks."""
from __future__ import annotations

import numpy as np
import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import comm
from llmdissect.perfmodel.advise import infer_space, pareto_front, train_space
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import InferSetup, TrainSetup
from llmdissect.perfmodel.estimate import estimate_infer, estimate_train
from llmdissect.perfmodel.roofline import Ceilings, gemm_time_s
from llmdissect.specs import get_model, resolve_platform


@pytest.fixture(scope="module")
def a800x8():
    plat = resolve_platform("8xa800")
    return plat, machine_for(plat, "bf16")


@pytest.mark.parametrize("kind,model", [("pretrain", "llama2-13b"), ("finetune", "llama2-13b"),
                                        ("pretrain", "mixtral-8x7b"), ("finetune", "qwen3-30b-a3b")])
def test_advise_rows_equal_the_scalar_estimate(kind, model, a800x8):
    plat, mach = a800x8
    m = get_model(model)
    space = train_space(kind, m, mach, 2048, 2)
    rng = np.random.default_rng(0)
    for i in rng.choice(len(space), size=25, replace=False):
        row = space.row(int(i))
        setup = TrainSetup(kind=kind, model=m, platform=plat, dtype="bf16", seq=2048, micro_batch=row["micro_batch"],
                           grad_accum=row["grad_accum"], zero=row["zero"], offload=row["offload"],
                           recompute=row["recompute"], attn=row["attn"], tp=row["tp"], pp=row["pp"],
                           lora_rank=row.get("lora_rank", 0), quant=row.get("quant", "none"), ep=row.get("ep", 1))
        est = estimate_train(setup, mach).metrics
        assert est["memory"]["total_bytes"] == pytest.approx(row["total_bytes"], rel=1e-9)
        assert est["tokens_per_s"] == pytest.approx(row["tokens_per_s"], rel=1e-9)
        assert est["fits"] == row["fits"]


def test_advise_searches_the_expert_parallel_degrees_a_moe_model_allows(a800x8):
    _, mach = a800x8
    knobs = train_space("pretrain", get_model("mixtral-8x7b"), mach, 2048, 2).knobs  # 8 experts, 8 devices
    assert set(knobs["ep"]) == {1, 2, 4, 8}
    dp = 8 // (knobs["tp"] * knobs["pp"])
    assert np.all(dp % knobs["ep"] == 0)  # the experts split over data-parallel ranks only
    assert "ep" not in train_space("pretrain", get_model("llama2-7b"), mach, 2048, 2).knobs  # dense: no knob


def test_advise_infer_rows_equal_the_scalar_estimate(a800x8):
    plat, mach = a800x8
    m = get_model("llama2-7b")
    space = infer_space(m, mach, 256, 64, 2)
    for i in range(0, len(space), 7):
        row = space.row(i)
        setup = InferSetup(model=m, platform=plat, batch=row["batch"], input_len=256, output_len=64,
                           attn=row["attn"], quant=row["quant"], tp=row["tp"])
        est = estimate_infer(setup, mach).metrics
        assert est["tokens_per_s"] == pytest.approx(row["tokens_per_s"], rel=1e-9)
        assert est["memory"]["total_bytes"] == pytest.approx(row["total_bytes"], rel=1e-9)


def test_mfu_never_exceeds_one_and_more_memory_is_monotone(a800x8):
    _, mach = a800x8
    space = train_space("pretrain", get_model("llama2-7b"), mach, 4096, 2)
    assert np.all(space.results["mfu"] > 0) and np.all(space.results["mfu"] < 1)
    knobs, res = space.knobs, space.results
    # full recomputation never needs more memory than none, everything else equal
    base = (knobs["zero"] == 1) & (knobs["offload"] == "none") & (knobs["tp"] == 1) & (knobs["pp"] == 1)
    none = res["total_bytes"][base & (knobs["recompute"] == "none")]
    full = res["total_bytes"][base & (knobs["recompute"] == "full")]
    assert np.all(full < none)


def test_pareto_front_is_not_dominated():
    thr = np.array([1.0, 3.0, 2.0, 5.0, 4.0])
    mem = np.array([1.0, 2.0, 2.5, 4.0, 3.0])
    assert list(pareto_front(thr, mem)) == [0, 1, 4, 3]


def test_calibration_efficiency_overrides_defaults():
    plat = resolve_platform("a800")
    setup = TrainSetup(kind="pretrain", model=get_model("llama2-7b"), platform=plat, seq=2048, zero=0,
                       kernels="fused")  # compute-bound: halving the GEMM and attention rates nearly halves it
    fast = estimate_train(setup, machine_for(plat, "bf16")).metrics
    slow_mach = machine_for(plat, "bf16", {"efficiency": {"gemm": 0.35, "attention": 0.25}}, explicit=True)
    slow = estimate_train(setup, slow_mach).metrics
    assert slow["time"]["forward_s"] > 1.8 * fast["time"]["forward_s"]
    assert slow["memory"] == fast["memory"]


def test_collective_fits_come_from_the_profile():
    plat = resolve_platform("8xa800")
    profile = {"gpus": {"A800-80G-SXM": {}}, "collectives": {"nccl": {"all_reduce": {
        "alpha_s": 3e-5, "beta_s_per_byte": 2e-11, "nproc": 8}}}}
    mach = machine_for(plat, "bf16", profile)
    assert mach.network.fits == {"all_reduce": (3e-5, 2e-11, 8)}
    assert "calibration profile" in mach.sources["collectives"]


def test_profile_for_another_machine_does_not_apply_implicitly():
    plat = resolve_platform("a800")
    mach = machine_for(plat, "bf16", {"cpu": {"peak_flops_per_s": {"bf16": 1e9}}, "efficiency": {"gemm": 0.1}})
    assert mach.ceilings.peak_flops_per_s == 312e12 and mach.efficiency["gemm"] == 0.7


def test_ring_collectives_follow_the_alpha_beta_model():
    net = comm.Network(bandwidth_bytes_per_s=100e9, alpha_s=1e-5, efficiency=1.0)
    size, n = 1e9, 8
    assert comm.collective_time_s(net, "all_reduce", size, n) == pytest.approx(2 * 7 * 1e-5 + 2 * 7 / 8 * size / 100e9)
    assert comm.collective_time_s(net, "all_gather", size, n) == pytest.approx(7 * 1e-5 + 7 / 8 * size / 100e9)
    assert comm.collective_time_s(net, "all_reduce", size, 1) == 0
    fitted = comm.Network(100e9, 1e-5, 1.0, fits={"all_reduce": (2e-5, 1e-11, 8)})
    assert comm.collective_time_s(fitted, "all_reduce", size, n) == pytest.approx(2e-5 + 1e-11 * size)
    # measured at 8 ranks: at 4 the ring model stands
    assert comm.collective_time_s(fitted, "all_reduce", size, 4) == comm.collective_time_s(net, "all_reduce", size, 4)
    # ZeRO-3 moves 1.5x the data-parallel volume (paper, section 7)
    dp = comm.data_parallel_comm_s(net, 0, size, size, n, 1)
    z3 = comm.data_parallel_comm_s(net, 3, size, size, n, 1)
    assert z3 == pytest.approx(1.5 * dp, rel=1e-3)
    assert comm.pipeline_bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert comm.exposed_s(10.0, 4.0, 0.5) == 8.0


def test_roofline_takes_the_slower_ceiling():
    c = Ceilings(100e12, 1e12, {"gemm": 0.5, "attention": 0.5, "memory": 0.5})
    assert gemm_time_s(c, 100e12, 1.0) == pytest.approx(2.0)  # compute-bound
    assert gemm_time_s(c, 1.0, 1e12) == pytest.approx(2.0)  # memory-bound


def test_decode_is_bandwidth_bound_and_batching_helps(a800x8):
    plat, mach = a800x8
    m = get_model("llama2-7b")
    one = estimate_infer(InferSetup(model=m, platform=resolve_platform("a800"), batch=1), machine_for(
        resolve_platform("a800"), "bf16")).metrics
    weights_read = m.params * 2 / (2.039e12 * 0.685)  # GEMMs stream weights at the `weights` efficiency
    # a layer's 14 launches (defaults.OP_FIXED_S_GPU) are queued while its weights stream in:
    # 53 us beside 0.25 ms, hidden; the 3 operators outside the layers still add theirs
    launches = 3 * 3.8e-6
    assert one["time"]["tpot_s"] == pytest.approx(weights_read + launches, rel=0.1)
    many = estimate_infer(InferSetup(model=m, platform=resolve_platform("a800"), batch=32, cache="static"),
                          machine_for(resolve_platform("a800"), "bf16")).metrics
    assert many["tokens_per_s"] > 10 * one["tokens_per_s"]
    assert one["max_batch"] > 32


@pytest.mark.parametrize("zero,nproc,offload", [(0, 1, "none"), (0, 8, "none"), (1, 8, "none"), (2, 8, "none"),
                                                (3, 8, "none"), (3, 8, "params")])
def test_engine_is_the_one_bench_pretrain_would_pick(zero, nproc, offload):
    pytest.importorskip("pydantic")
    from llmdissect.workloads.train_config import TrainConfig, resolve_engine

    plat = resolve_platform("a800", nproc)
    setup = TrainSetup(kind="pretrain", model=get_model("tiny-llama"), platform=plat, seq=128, zero=zero,
                       offload=offload)
    measured = resolve_engine(TrainConfig(zero=zero, nproc=nproc, offload=offload)).engine
    assert setup.config()["engine"] == measured


def test_gpu_section_named_as_torch_names_the_device():
    plat = resolve_platform("h100")
    profile = {"gpus": {"NVIDIA H100 80GB HBM3": {"peak_flops_per_s": {"bf16": 7e14},
                                                  "efficiency": {"gemm": 0.6}}},
               "efficiency": {"gemm": 0.3, "memory": 0.7}}
    mach = machine_for(plat, "bf16", profile)
    assert mach.ceilings.peak_flops_per_s == 7e14
    assert mach.efficiency["gemm"] == 0.6 and mach.efficiency["memory"] == 0.7


def test_named_assumptions_are_overridable_by_the_profile():
    from llmdissect.errors import UserError

    plat = resolve_platform("a800")
    setup = TrainSetup(kind="pretrain", model=get_model("llama2-7b"), platform=plat, seq=1024, zero=0)
    base = estimate_train(setup, machine_for(plat, "bf16")).metrics["memory"]
    assert base["other_bytes"] == pytest.approx(2**30 + 0.05 * (base["total_bytes"] - base["other_bytes"]))
    bare = machine_for(plat, "bf16", {"perfmodel": {"framework_context_bytes": 0, "fragmentation_fraction": 0}},
                       explicit=True)
    assert estimate_train(setup, bare).metrics["memory"]["other_bytes"] == 0
    with pytest.raises(UserError, match="unknown perfmodel assumption"):
        machine_for(plat, "bf16", {"perfmodel": {"context": 1}}, explicit=True)


def test_every_platform_link_reaches_its_own_latency_family():
    from llmdissect.specs import list_platforms

    for plat in list_platforms():
        link = plat.interconnect or plat.device.link
        assert comm.link_family(link.kind) != "default", (plat.name, link.kind)
    assert comm.link_family("nvswitch-nvlink4") == "nvswitch"
    assert comm.link_family("pcie4-x16") == "pcie"
    assert comm.link_family("ib-ndr") == "net"


def test_a_small_collective_costs_nccls_base_plus_steps():
    """NCCL's tuning model (ring, LL): 3.6 us + nsteps x 0.47 us on NVLink; an all-reduce over
    8 GPUs has 2 x 7 steps: 10.18 us whatever the message, before bandwidth."""
    mach = machine_for(resolve_platform("8xh100"), "bf16")
    t = comm.collective_time_s(mach.network, "all_reduce", 8, 8)
    assert t == pytest.approx(3.6e-6 + 14 * 0.47e-6, rel=1e-3)
    # weak dependence on ranks: 2 ranks cost 3.6 + 2 x 0.47 us, not 7x less
    t2 = comm.collective_time_s(mach.network, "all_reduce", 8, 2)
    assert t2 == pytest.approx(3.6e-6 + 2 * 0.47e-6, rel=1e-3)
    assert t / t2 < 2.5


def test_processes_on_one_cpu_share_its_peak_and_bandwidth():
    profile = {"cpu": {"peak_flops_per_s": {"fp32": 200e9}, "memory_bandwidth_bytes_per_s": 20e9}}
    one = machine_for(resolve_platform("cpu"), "fp32", profile)
    two = machine_for(resolve_platform("cpu", 2), "fp32", profile)
    assert one.ceilings.peak_flops_per_s == 200e9
    assert two.ceilings.peak_flops_per_s == 100e9 and two.ceilings.memory_bandwidth_bytes_per_s == 10e9
    assert "share one CPU" in two.sources["sharing"]
    # GPUs do not share: each device keeps its own peak
    assert machine_for(resolve_platform("8xh100"), "bf16").ceilings.peak_flops_per_s == \
        machine_for(resolve_platform("h100"), "bf16").ceilings.peak_flops_per_s


def test_the_estimate_says_which_collective_fit_it_used():
    fits = {"all_reduce": {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9, "nproc": 2}}
    profile = {"cpu": {"peak_flops_per_s": {"fp32": 1e11}, "memory_bandwidth_bytes_per_s": 1e10},
               "collectives": {"gloo": fits}}
    at2 = machine_for(resolve_platform("cpu", 2), "fp32", profile).sources["collectives"]
    at4 = machine_for(resolve_platform("cpu", 4), "fp32", profile).sources["collectives"]
    assert "fits at 2 processes for all_reduce" in at2
    assert "measured at [2] processes, not 4" in at4


def test_a_dynamic_cache_rewrites_itself_every_decode_step():
    """transformers' DynamicCache appends by torch.cat: per step it reads and writes the whole
    cache (2 x its bytes at the memory rate) beside attention's read; a static cache does not."""
    from llmdissect.perfmodel import kvcache

    m, plat = get_model("llama2-7b"), resolve_platform("a800")
    mach = machine_for(plat, "bf16")
    setups = {c: InferSetup(model=m, platform=plat, batch=16, input_len=1024, output_len=128, cache=c)
              for c in ("dynamic", "static")}
    tpot = {c: estimate_infer(s, mach).metrics["time"]["tpot_s"] for c, s in setups.items()}
    cache = kvcache.kv_cache_bytes(m, 16, 1024 + 128 / 2, 2)
    assert tpot["dynamic"] - tpot["static"] == pytest.approx(2 * cache / mach.ceilings.bytes_per_s())
    with pytest.raises(UserError, match="cache"):
        InferSetup(model=m, platform=plat, cache="paged-ish")


def test_a_gpu_hides_launches_behind_long_kernels_and_waits_on_short_ones():
    from llmdissect.perfmodel.layertime import launch_bound

    gpu = machine_for(resolve_platform("a800"), "bf16").ceilings
    f = gpu.op_fixed_s
    assert gpu.asynchronous and launch_bound(gpu, 1e-3, 14) == 1e-3  # kernels longer than the launches
    assert launch_bound(gpu, 1e-6, 14) == pytest.approx(14 * f)  # launch-bound: the kernels wait on the host
    cpu = Ceilings(1e11, 1e10, {"gemm": 0.5, "attention": 0.5, "memory": 0.5}, op_fixed_s=2e-5)
    assert not cpu.asynchronous and launch_bound(cpu, 1e-3, 14) == pytest.approx(1e-3 + 14 * 2e-5)  # the sum
    # debug-llama decodes launch-bound on a GPU: each layer's 14 launches, whatever its tiny kernels
    m = get_model("debug-llama")
    tpot = estimate_infer(InferSetup(model=m, platform=resolve_platform("a800"), batch=1, input_len=128),
                          machine_for(resolve_platform("a800"), "bf16")).metrics["time"]["tpot_s"]
    assert tpot >= m.num_layers * 14 * f
