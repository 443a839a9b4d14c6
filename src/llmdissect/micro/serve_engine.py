"""What a continuous-batching engine costs per iteration beyond the model (the child side of
`peak`, on a CPU): transformers' own engine, the one `serve-local` runs.

Each iteration of transformers' continuous batching (generation/continuous_batching) builds
the batch's index tensors, runs the model's forward, samples and hands each sequence's token
to its request, all in Python on the host. Its decode iterations are timed offline
(`generate_batch` with per-token timestamps, no HTTP) with 1 and with N sequences of the
probe model, whose own forward of 1 and of N tokens is timed beside them; then

    serve_engine_step_s = t_iteration(1) - t_forward(1)
    serve_engine_seq_s  = ((t_iteration(N) - t_forward(N)) - serve_engine_step_s) / (N - 1)

are what the iteration costs on top of the model, once and per running sequence. Part of
the first grows with the model's depth (the paged cache's bookkeeping, per layer: on one
thread of a 2-core VM 0.30, 0.55 and 1.0 ms an iteration at 2, 6 and 12 layers), so one
sequence's iteration is timed again with the probe model built DEEP layers deep:

    serve_engine_layer_s = ((t_iteration_deep(1) - t_forward_deep(1)) - (t_iteration(1) - t_forward(1)))
                           / (DEEP - layers)
    serve_engine_step_s  = t_iteration(1) - t_forward(1) - layers x serve_engine_layer_s

The serving simulation adds step + layers x layer_s + seqs x seq_s to each iteration of the
`transformers` profile (perfmodel.servestep). Each time is the least of BLOCKS medians of the
decode gaps of every request (the first token, the prompt's, is left out); the six timings take
turns, block by block, so that a slow stretch of the machine costs each one block.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any

PROBE_MODEL = "debug-llama"
PROMPT_TOKENS = 16
NEW_TOKENS = 12
MANY = 8
DEEP = 6
BLOCKS = 5
"""Each timing is the least of this many medians, its blocks interleaved with the others' (in
one quick-suite round of 2026-12-07 the deep model's blocks, timed one after another before
the rest, all fell in one slow stretch: 555 us a layer against 108 and 216 in the next two
rounds and 69 in a quiet one, and serving's TPOT was priced 2x)."""


def _decode_gaps(outputs: dict) -> list[float]:
    gaps: list[float] = []
    for out in outputs.values():
        ts = list(out.timestamps or [])
        gaps += [b - a for a, b in zip(ts[1:], ts[2:])]
    return gaps


def measure_serve_engine(device: str = "cpu", seed: int = 0) -> dict[str, Any]:
    """serve_engine_step_s and serve_engine_seq_s (seconds) with the timings they come from."""
    import time

    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from llmdissect.modeling import build_model
    from llmdissect.quiet import quiet_libraries
    from llmdissect.specs import get_model

    quiet_libraries()
    spec = get_model(PROBE_MODEL)
    gen = torch.Generator().manual_seed(seed)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(num_blocks=64, max_batch_tokens=256)
    deep_model = build_model(dataclasses.replace(spec, num_layers=DEEP), dtype="fp32", attn="sdpa", device=device,
                             seed=seed).eval()
    model = build_model(spec, dtype="fp32", attn="sdpa", device=device, seed=seed).eval()

    def iteration(net, n: int) -> float:
        prompts = [torch.randint(3, spec.vocab_size, (PROMPT_TOKENS,), generator=gen).tolist() for _ in range(n)]
        out = net.generate_batch(prompts, generation_config=config, continuous_batching_config=cb,
                                 record_timestamps=True, progress_bar=False)
        return statistics.median(_decode_gaps(out))

    def forward(net, n: int) -> float:
        ids = torch.randint(3, spec.vocab_size, (n, PROMPT_TOKENS), generator=gen)
        token = torch.randint(3, spec.vocab_size, (n, 1), generator=gen)
        with torch.no_grad():
            cache = net(ids, use_cache=True).past_key_values
            times = []
            for _ in range(3 + NEW_TOKENS):
                start = time.perf_counter()
                net(token, past_key_values=cache, use_cache=True)
                times.append(time.perf_counter() - start)
                cache.crop(-1)
        return statistics.median(times[3:])

    timings = {"deep_iteration": lambda: iteration(deep_model, 1), "deep_forward": lambda: forward(deep_model, 1),
               "iteration_1": lambda: iteration(model, 1), "forward_1": lambda: forward(model, 1),
               "iteration_many": lambda: iteration(model, MANY), "forward_many": lambda: forward(model, MANY)}
    iteration(deep_model, 1)  # the first call sets the engine up
    iteration(model, 1)
    blocks: dict[str, list[float]] = {k: [] for k in timings}
    for _ in range(BLOCKS):  # interleaved: a slow stretch costs one block of each, not every block of one
        for key, timed in timings.items():
            blocks[key].append(timed())
    # a jitter spike on a shared machine is as long as these costs: each timing is its quietest block
    least = {k: min(v) for k, v in blocks.items()}
    t1, tn, f1, fn = least["iteration_1"], least["iteration_many"], least["forward_1"], least["forward_many"]
    deep = max(0.0, least["deep_iteration"] - least["deep_forward"])
    return {**engine_costs(t1 - f1, tn - fn, deep, spec.num_layers), "serve_iteration_1_s": t1,
            f"serve_iteration_{MANY}_s": tn, "serve_forward_1_s": f1, f"serve_forward_{MANY}_s": fn,
            f"serve_engine_{DEEP}_layers_s": deep, "serve_engine": "transformers"}


def engine_costs(one: float, many: float, deep: float, layers: int) -> dict[str, float]:
    """The engine's costs from what its iterations paid beyond the forward: `one` sequence and
    `many` (MANY) sequences with the probe model, one sequence with it DEEP layers deep."""
    per_layer = max(0.0, (deep - one) / (DEEP - layers))
    one = max(0.0, one)
    step = max(0.0, one - layers * per_layer)
    return {"serve_engine_step_s": step, "serve_engine_layer_s": per_layer,
            "serve_engine_seq_s": max(0.0, (many - one) / (MANY - 1))}
