"""Fixed costs a roofline cannot see, measured on this machine (the child side of `peak`).

- `op_fixed_s`: what one operator of a decoder layer costs beyond its bytes and FLOPs
  (eager dispatch, Python, allocator; a kernel launch on a GPU). Measured as the forward of
  one `debug-llama` decoder layer for one token, whose weights (185 KB) sit in the caches so
  that its roofline time is a few microseconds, divided by the operators the layer runs in
  the operator table (`perfmodel.op_costs.LAYER_FORWARD_OPS`).
- `cache_update_s`: what a decoder layer's inference forward pays to update its KV cache
  beyond the bytes it appends (transformers' cache object, the concatenation's dispatch):
  the same layer's one-token forward with a cache of PROMPT_TOKENS positions (cut back to
  them after each call) minus it without one.
- `op_fixed_cold_s`: `op_fixed_s` when the host's caches were emptied first (CPU only): the
  same layer's forward, each call after an untimed read of twice the last-level cache. The
  probe's loop keeps the layer's Python objects, dispatch tables and weights in the caches;
  a model whose forward streams more than the cache holds finds each layer's objects evicted
  by the time it runs them again (perfmodel.layertime.cold_cache_scale).
- `forward_fixed_s`: what one forward of the model pays outside its layers (attention-mask
  and rotary set-up, embedding, final norm, head): the one-token forward of `debug-llama`
  minus its layers, each with its cache's update.
- `generate_call_s`: what one `generate` call pays before its first token beyond the
  prompt's forward (generation config, logits processors, cache set-up, the first pick):
  a one-token `generate` minus the prompt's forward.
- `optimizer_tensor_s`: what torch's AdamW step and zero_grad pay per parameter tensor
  beyond its bytes (on a CPU the single-tensor implementation runs about ten operators per
  tensor, each a dispatch): a step over OPTIMIZER_TENSORS tensors of 64 elements, whose
  traffic is negligible, divided by their number.
- `generate_step_s`: what `generate` pays per decode step outside the model's forward
  (logits processing, the greedy pick, stopping checks, cache bookkeeping): the time per
  further step of a `debug-llama` generate call minus the time of its one-token forward.

Each is the least of three block medians of the one timer's loop (measure.Timer,
LoopPolicy), with a fixed seed.
"""
from __future__ import annotations

from typing import Any

PROBE_MODEL = "debug-llama"
PROMPT_TOKENS = 16
GENERATE_TOKENS = 16


OPTIMIZER_TENSORS = 64

BLOCKS = 3
"""Each time is the least of the medians of this many blocks of the loop: a block that
another process on the machine slowed (a shared 2-core VM: one in three here, by 2-50x)
does not set the machine's fixed costs, which are subtracted from one another."""


def timed_s(fn: Any, device: str, min_time_s: float) -> float:
    import torch

    from llmdissect.measure import LoopPolicy, Timer, measure_loop

    sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else None
    timer = Timer(device, sync)
    return min(measure_loop(fn, LoopPolicy(warmup=3 if block == 0 else 1, min_iters=10,
                                           min_time_s=min_time_s / BLOCKS), timer).stats.median
               for block in range(BLOCKS))


def timed_cold_s(fn: Any, evict: Any, min_time_s: float) -> float:
    """As timed_s, on a CPU, with `evict` run (untimed) before every call of `fn`."""
    import statistics
    import time

    medians = []
    for _ in range(BLOCKS):
        fn()
        times: list[float] = []
        while len(times) < 10 or sum(times) < min_time_s / BLOCKS:
            evict()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return min(medians)


def eviction(device: str) -> Any:
    """A read of twice the last-level cache (32 MiB where sysfs does not say), or None off a
    CPU (a GPU's kernels do not stream through the host's caches)."""
    if device != "cpu":
        return None
    import torch

    from llmdissect.specs.hardware import last_level_cache_bytes

    buffer = torch.ones(2 * (last_level_cache_bytes() or 2**25) // 4)
    return buffer.sum


def measure_overheads(device: str, min_time_s: float = 0.2, seed: int = 0) -> dict[str, Any]:
    """The fixed costs (seconds) and the timings they come from."""
    import torch

    from llmdissect.modeling import build_model
    from llmdissect.perfmodel.op_costs import LAYER_FORWARD_OPS
    from llmdissect.quiet import quiet_libraries
    from llmdissect.specs import get_model

    quiet_libraries()
    spec = get_model(PROBE_MODEL)
    model = build_model(spec, dtype="fp32", attn="sdpa", device=device, seed=seed).eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    prompt = torch.randint(0, spec.vocab_size, (1, PROMPT_TOKENS), generator=gen).to(device)
    token = torch.randint(0, spec.vocab_size, (1, 1), generator=gen).to(device)
    with torch.no_grad():
        cache = model(prompt, use_cache=True).past_key_values

        def forward_one_token() -> None:  # one decode step's forward; the cache is cut back after
            model(token, past_key_values=cache, use_cache=True)
            cache.crop(-1)

        layer = model.model.layers[0]
        hidden = torch.randn(1, 1, spec.hidden_size, generator=gen).to(device)
        position = torch.zeros(1, 1, dtype=torch.long, device=device)
        rotary = model.model.rotary_emb(hidden, position)

        def layer_forward() -> None:
            layer(hidden, position_embeddings=rotary, position_ids=position)

        at = torch.tensor([PROMPT_TOKENS], device=device)
        at_rotary = model.model.rotary_emb(hidden, at.view(1, 1))

        def layer_forward_cached() -> None:  # the layer appends to its cache; cut back after
            layer(hidden, position_embeddings=at_rotary, position_ids=at.view(1, 1), past_key_values=cache,
                  use_cache=True, cache_position=at)
            cache.layers[0].crop(-1)

        def generate(tokens: int) -> None:
            model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)

        t_layer = timed_s(layer_forward, device, min_time_s)
        t_layer_cached = timed_s(layer_forward_cached, device, min_time_s)
        evict = eviction(device)
        t_layer_cold = timed_cold_s(layer_forward, evict, min_time_s) if evict else 0.0
        t_forward = timed_s(forward_one_token, device, min_time_s)
        t_generate = timed_s(lambda: generate(GENERATE_TOKENS), device, min_time_s)
        t_first = timed_s(lambda: generate(1), device, min_time_s)
        t_prefill = timed_s(lambda: model(prompt, use_cache=True), device, min_time_s)
    t_optimizer = _optimizer_step_s(device, min_time_s)
    # generate = set-up + prefill + first pick, then GENERATE_TOKENS - 1 decode steps
    per_step = (t_generate - t_first) / (GENERATE_TOKENS - 1)
    # what one forward pays outside its layers (mask and rotary set-up, embedding, final
    # norm, head), whatever the model's size; each of its layers updates its cache
    cache_update = max(0.0, t_layer_cached - t_layer)
    outside = max(0.0, t_forward - spec.num_layers * (t_layer + cache_update))
    return {"op_fixed_s": t_layer / len(LAYER_FORWARD_OPS), "forward_fixed_s": outside,
            "op_fixed_cold_s": t_layer_cold / len(LAYER_FORWARD_OPS), "layer_forward_cold_s": t_layer_cold,
            "cache_update_s": cache_update, "layer_forward_cached_s": t_layer_cached,
            "generate_step_s": max(0.0, per_step - t_forward),
            "generate_call_s": max(0.0, t_first - t_prefill), "optimizer_tensor_s": t_optimizer / OPTIMIZER_TENSORS,
            "layer_forward_s": t_layer,
            "layer_ops": len(LAYER_FORWARD_OPS), "forward_one_token_s": t_forward, "probe_model": PROBE_MODEL}


def _optimizer_step_s(device: str, min_time_s: float) -> float:
    """One AdamW step and zero_grad over OPTIMIZER_TENSORS tiny tensors with torch's default
    implementation for the device. The bench sets gradients to None; here they are kept
    (zeroed), so that every timed step has gradients to apply."""
    import torch

    params = [torch.nn.Parameter(torch.zeros(64, device=device)) for _ in range(OPTIMIZER_TENSORS)]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(params)

    def step() -> None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    return timed_s(step, device, min_time_s)
