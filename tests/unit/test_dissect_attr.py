"""Attribution of a real profiled step (debug-llama, in this process): phases follow the
step's own marks through gradient accumulation, shares add to 1, recomputation included."""
import pytest


def _profiled_step(model="debug-llama", **options):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from llmdissect.engines.distributed import init_distributed
    from llmdissect.measure.timer import Timer
    from llmdissect.workloads.dissect_attr import attribute
    from llmdissect.workloads.dissect_train_child import PhaseTimer, add_module_ranges
    from llmdissect.workloads.train_child import Stepper, _batches, _build
    from llmdissect.workloads.train_launch import prepare

    cfg = prepare("pretrain", model=model, seq=16, micro_batch=1, device="cpu", **options)
    ctx = init_distributed("cpu")
    torch.manual_seed(0)
    model, opt = _build(cfg, ctx)
    stepper = Stepper(cfg, model, opt, _batches(cfg, ctx), Timer("cpu"), "cpu")
    stepper.step()
    add_module_ranges(model)
    stepper.timer = PhaseTimer(Timer("cpu"), cfg.grad_accum)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        stepper.step()
        stepper.step()
    phases = [e.name for e in sorted(prof.events(), key=lambda e: e.time_range.start) if e.name.startswith("phase:")]
    return attribute(prof.events(), 2), phases


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(grad_accum=2), dict(recompute="full")])
def test_attribution_of_real_steps(options):
    result, phases = _profiled_step(**options)
    g = options.get("grad_accum", 1)
    one = ["phase:forward", "phase:backward"] * g + ["phase:optimizer"]
    assert phases == one * 2
    assert len(result["steps"]) == 2
    for step in result["steps"]:
        assert sum(step["modules_share"].values()) == pytest.approx(1, abs=1e-9)
        assert step["attributed_s"] == pytest.approx(step["step_s"], rel=0.02)
        for key in ("embedding", "attention projections", "attention core", "MLP", "norms", "output head", "loss",
                    "optimizer"):
            assert step["modules_s"][key] > 0, key
    assert result["top_ops"][0]["self_s"] > 0
    assert not {"router", "experts", "shared experts"} & set(result["steps"][0]["modules_s"])  # dense: not shown


@pytest.mark.slow
def test_a_mixture_of_experts_step_has_router_experts_and_shared_experts_shares():
    # tiny-mla: DeepSeek-V3's layout (latent attention, one shared and 8 routed experts, a dense first layer)
    result, _ = _profiled_step(model="tiny-mla")
    for step in result["steps"]:
        assert sum(step["modules_share"].values()) == pytest.approx(1, abs=1e-9)
        for key in ("router", "experts", "shared experts", "attention projections", "MLP"):
            assert step["modules_s"][key] > 0, key
    # the routed experts are most of the MoE layers' work (8 experts, 2 per token, vs one
    # shared): 5-6x the router's time here; in some step, as a stall on a loaded machine
    # (one failed the per-step form while a CI run shared the cores) hits one step, not all
    assert any(step["modules_s"]["experts"] > step["modules_s"]["router"] for step in result["steps"])


def test_module_names_of_moe_and_latent_attention_models():
    from llmdissect.workloads.dissect_attr import module_category

    assert module_category("model.layers.1.mlp.gate") == "router"
    assert module_category("model.layers.1.mlp.router") == "router"  # gpt-oss
    assert module_category("model.layers.1.mlp.experts") == "experts"
    assert module_category("model.layers.1.mlp.shared_experts") == "shared experts"
    assert module_category("model.layers.1.mlp.shared_expert") == "shared experts"  # Qwen2-MoE
    assert module_category("model.layers.0.mlp.gate_proj") is None  # a dense MLP's linear: in its MLP
    for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"):
        assert module_category(f"model.layers.0.self_attn.{proj}") == "attention projections"


def _step(step_s, forward):
    modules = {"MLP": forward, "optimizer": step_s - forward}
    return {"step_s": step_s, "phases_s": {"forward": forward, "optimizer": step_s - forward},
            "phases_share": {"forward": forward / step_s, "optimizer": 1 - forward / step_s},
            "modules_s": modules, "modules_share": {k: v / step_s for k, v in modules.items()}}


def test_profile_metrics_are_medians_and_per_step_means():
    from llmdissect.workloads.dissect_attr import add_top_ops, profile_metrics

    ops = {}
    add_top_ops(ops, {"top_ops": [{"op": "aten::mm", "self_s": 0.4, "calls": 3}]})
    add_top_ops(ops, {"top_ops": [{"op": "aten::mm", "self_s": 0.2, "calls": 3},
                                  {"op": "aten::add", "self_s": 0.1, "calls": 1}]})
    steps = [_step(1.0, 0.6), _step(3.0, 1.0)]
    m = profile_metrics(steps, ops, [0.5, 1.5], trace=None)
    assert m["untraced_step_s"] == 1.0 and m["profiled_step_s"] == 2.0
    assert m["profiling_overhead"] == pytest.approx(1.0)
    assert m["phases_s"]["forward"] == pytest.approx(0.8) and m["modules_s"]["MLP"] == pytest.approx(0.8)
    assert sum(m["modules_share"].values()) == pytest.approx(1)
    # per traced step (a step without the operator counts 0), shares of the mean step (2 s)
    assert [(o["op"], o["self_s"], o["calls"]) for o in m["top_ops"]] == [
        ("aten::mm", pytest.approx(0.3), 3), ("aten::add", pytest.approx(0.05), 0.5)]
    assert m["top_ops"][0]["share"] == pytest.approx(0.15)
    assert m["per_step"] is steps and m["untraced_steps_s"] == [0.5, 1.5] and m["trace"] is None
