"""The MoE, latent-attention and sliding-window formulas against the real transformers
models (random weights, CPU): forward FLOPs per token against torch's FLOP counter, KV-cache
bytes against the tensors `generate` leaves in its cache."""
import dataclasses

import pytest

from llmdissect.modeling import build_model
from llmdissect.perfmodel import flops as fl
from llmdissect.specs import get_model
from llmdissect.workloads.infer_child import cache_tensor_bytes
from llmdissect.workloads.infer_metrics import kv_cache_bytes_formula

pytestmark = pytest.mark.slow  # builds and runs small models (seconds on 2 shared cores)


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-mla"])
def test_flops_match_torch_flop_counter(name):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    spec = get_model(name)
    model = build_model(spec, attn="eager")  # eager attention: its matmuls are visible to the counter
    model.config._experts_implementation = "eager"  # one F.linear per expert; grouped_mm is not counted
    b, s = 2, 32
    ids = torch.randint(0, spec.vocab_size, (b, s), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids)
    # 2 N_active per token for every linear (router, k experts, shared experts, MLA's projections,
    # head) plus the full-square attention core of every layer
    predicted = b * s * (2 * spec.params_matmul + spec.num_layers * fl.layer_attention_flops_fwd(spec, s))
    assert counter.get_total_flops() == pytest.approx(predicted, rel=0.02)
    # a training step: forward and backward, PaLM's 6 N_active + 12 L d_attn s per token
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert counter.get_total_flops() == pytest.approx(b * s * fl.model_flops_per_token(spec, s), rel=0.02)


def _small(name, **changes):
    return dataclasses.replace(get_model(name), name=f"{name}-small", **changes)


SMALL = {
    "tiny-mla": lambda: get_model("tiny-mla"),
    "gemma3-window": lambda: dataclasses.replace(
        get_model("gemma3-12b"), name="gemma3-window", hidden_size=64, intermediate_size=128, num_layers=6,
        num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=512, sliding_window=8, sliding_window_pattern=3),
    "gpt-oss-window": lambda: dataclasses.replace(
        get_model("gpt-oss-20b"), name="gpt-oss-window", hidden_size=64, intermediate_size=32, num_layers=4,
        num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=512, sliding_window=8, num_experts=4,
        experts_per_token=2, expert_intermediate_size=32),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_kv_cache_bytes_match_generate(name):
    import torch

    spec = SMALL[name]()
    model = build_model(spec, attn="eager")
    batch, n_in, n_out = 2, 12, 6
    ids = torch.randint(1, spec.vocab_size, (batch, n_in), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n_out, min_new_tokens=n_out, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True)
    held, _ = cache_tensor_bytes(out.past_key_values)
    assert held == kv_cache_bytes_formula(spec, batch, n_in + n_out - 1, 4)


def test_bench_infer_runs_the_tiny_moe_and_counts_the_experts_reached():
    import torch

    from llmdissect.workloads.infer_child import run

    spec = get_model("tiny-moe")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        m = run({"model": "tiny-moe", "hardware": "cpu", "batch": 1, "input_len": 8, "output_len": 4,
                 "dtype": "fp32", "attn": "sdpa", "cache": "dynamic", "quant": "none", "compile": False,
                 "warmup": 1, "repeats": 2, "seed": 0, "device": "cpu"})["metrics"]
    finally:
        torch.set_num_threads(before)
    assert m["kv_cache_bytes"] == kv_cache_bytes_formula(spec, 1, 8 + 4 - 1, 4)
    # one token reaches its 2 of 8 experts in each layer: 6/8 of the routed weights stay unread
    routed = 4 * spec.num_experts * spec.params_expert * 4
    head = spec.params_head * 4
    assert m["weights_bytes"] - m["weights_bytes_read_per_step"] == pytest.approx(
        spec.params_embedding * 4 + routed * 6 / 8, rel=1e-6)
    assert m["weights_bytes_read_per_step"] > head


@pytest.mark.parametrize("targets", ["q_proj,v_proj,experts", "experts"])
def test_lora_on_the_routed_experts_trains_what_the_estimate_counts(targets):
    """PEFT's target_parameters on the stacked expert weights: the adapters the real model
    trains are those `lora_params` counts (E r (in + out) per expert weight and MoE layer)."""
    import torch

    from llmdissect.perfmodel.weights import lora_params
    from llmdissect.techniques.lora import apply_lora

    spec = get_model("tiny-moe")
    model = apply_lora(build_model(spec), "lora", 8, 16, targets.split(","), torch.float32)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == lora_params(spec, 8, tuple(targets.split(",")))
    ids = torch.randint(0, spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    grads = [n for n, p in model.named_parameters() if p.grad is not None]
    assert grads and all("lora_" in n for n in grads)  # the experts' own weights stay frozen
    assert any("experts" in n for n in grads)
