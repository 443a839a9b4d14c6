"""Attribution of a real profiled step (debug-llama, in this process): phases follow the
step's own marks through gradient accumulation, shares add to 1, recomputation included."""
import pytest


def _profiled_step(**options):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from llmdissect.engines.distributed import init_distributed
    from llmdissect.measure.timer import Timer
    from llmdissect.workloads.dissect_train_child import PhaseTimer, add_module_ranges
    from llmdissect.workloads.dissect_attr import attribute
    from llmdissect.workloads.train_child import Stepper, _batches, _build
    from llmdissect.workloads.train_launch import prepare

    cfg = prepare("pretrain", model="debug-llama", seq=16, micro_batch=1, device="cpu", **options)
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
