"""The child side of `dissect infer`: one offline-inference point (the infer workload's
model loading and quantization), generate calls alternately untraced and under
torch.profiler. A `step:generate` range marks each call; the causal-LM's first forward of a
call is `phase:prefill`, every later one `phase:decode`; generate's own loop (sampling,
stopping checks, cache bookkeeping) between them is `other`. An untraced call is timed by
the one Timer (marks at its edges); a traced one on the profiler's clock (`dissect_attr`)."""
from __future__ import annotations

from typing import Any


def _phase_hooks(model: Any, state: dict[str, Any]) -> list[Any]:
    import torch

    def pre(mod, args, kwargs):
        name = "prefill" if state["calls"] == 0 else "decode"
        state["calls"] += 1
        state["range"] = torch.profiler.record_function(f"phase:{name}")
        state["range"].__enter__()

    def post(mod, args, kwargs, out):
        state.pop("range").__exit__(None, None, None)

    # registered after the module ranges: the phase opens first and closes last (it encloses the root's range)
    return [model.register_forward_pre_hook(pre, with_kwargs=True, prepend=True),
            model.register_forward_hook(post, with_kwargs=True)]


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Child entry: an infer point's config (InferPoint.to_config()) plus `profile_steps` and `trace`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from llmdissect.config import parse_config
    from llmdissect.measure.env import capture_device_env
    from llmdissect.measure.timer import Timer
    from llmdissect.progress import report
    from llmdissect.specs import get_model
    from llmdissect.techniques.quantization import apply_quantization
    from llmdissect.workloads.dissect_attr import add_top_ops, attribute, profile_metrics
    from llmdissect.workloads.dissect_train_child import add_module_ranges
    from llmdissect.workloads.infer_child import load_model
    from llmdissect.workloads.infer_config import InferPoint

    point = parse_config(InferPoint, **{k: v for k, v in config.items() if k in InferPoint.model_fields})
    device, n = point.device, int(config["profile_steps"])
    spec = get_model(point.model)
    model, _ = load_model(point, spec)
    model.eval()
    apply_quantization(model, point.quant, dtype=point.dtype, device=device)
    model.generation_config.disable_compile = True
    gen = torch.Generator().manual_seed(point.seed)
    ids = torch.randint(0, spec.vocab_size, (point.batch, point.input_len), generator=gen).to(device)
    out = point.output_len
    kw = dict(max_new_tokens=out, min_new_tokens=out, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones_like(ids))
    if point.cache == "static":
        kw["cache_implementation"] = "static"
    timer = Timer(device)
    state = {"calls": 0}
    total = point.warmup + 2 * n

    def call() -> float:
        state["calls"] = 0
        timer.synchronize()
        start = timer.now()
        with torch.profiler.record_function("step:generate"):
            model.generate(ids, **kw)
            timer.synchronize()  # the range ends when the device is done
        return timer.elapsed_s(start, timer.now())

    handles = add_module_ranges(model, root="other") + _phase_hooks(model, state)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    untraced, steps, ops = [], [], {}
    with torch.inference_mode():
        for i in range(point.warmup):
            report(config, i, total, "warm-up")
            call()
        for i in range(n):
            report(config, total - 2 * (n - i), total, "untraced generate")
            untraced.append(call())
            report(config, total - 2 * (n - i) + 1, total, "traced generate")
            with profile(activities=activities) as prof:
                call()
            result = attribute(prof.events(), 1, top_n=1000)
            steps += result["steps"]
            add_top_ops(ops, result)
            if i == 0 and config.get("trace"):
                prof.export_chrome_trace(config["trace"])
    for h in handles:
        h.remove()
    return {"metrics": profile_metrics(steps, ops, untraced, config.get("trace")), "env": capture_device_env()}
