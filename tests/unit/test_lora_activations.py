"""What a LoRA step's layers save (activations.lora_layer_delta_bytes) against the live tensors
of real PEFT steps on this CPU: randomly initialised tiny-llama (fp32) and debug-llama (bf16),
SDPA, adapters on the attention, on everything, or on the MLP, measured as
test_perfmodel_activations measures full training (live_tensor_tracker around one forward and
backward). Adapters in the compute dtype (autocast_adapter_dtype=False; see the function's
docstring for PEFT's fp32 default). Dropout is not measured here: the CPU's dropout keeps a
mask of the input's dtype where CUDA's native one keeps a byte, and the formula takes CUDA's;
its bytes are checked in closed form.
"""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.stepmemory import training_step_peak_bytes
from llmdissect.specs import get_model

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def _measure(name: str, b: int, s: int, dtype: str, targets: tuple, recompute: str) -> tuple[int, int]:
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from llmdissect.measure.memory import live_tensor_tracker
    from llmdissect.modeling import build_model
    from llmdissect.techniques.recompute import apply_recompute

    torch.set_num_threads(1)
    spec = get_model(name)
    model = build_model(spec, attn="sdpa", dtype=dtype, seed=0)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=list(targets), lora_dropout=0.0, bias="none",
                             task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, config, autocast_adapter_dtype=False)
    model.train()
    apply_recompute(model, recompute)
    if recompute != "none":
        model.enable_input_require_grads()  # as PEFT's own gradient-checkpointing preparation does
    ids = torch.randint(0, spec.vocab_size, (b, s), generator=torch.Generator().manual_seed(0))
    tracker = live_tensor_tracker()
    with tracker:
        loss = model(input_ids=ids, labels=ids).loss
        tracker._sweep()
        after_forward = tracker.current_bytes
        loss.backward()
    return after_forward, tracker.peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name,b,s,dtype", [("tiny-llama", 2, 256, "fp32"), ("debug-llama", 4, 256, "bf16")])
@pytest.mark.parametrize("targets", [ATTENTION, wt.LINEAR_NAMES])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_lora_layers_save_what_their_adapters_and_activations_need(name, b, s, dtype, targets, recompute):
    spec = get_model(name)
    e = 4 if dtype == "fp32" else 2
    level = act.RECOMPUTE_LEVEL[recompute]
    delta = act.lora_layer_delta_bytes(spec, b, s, e, targets, 8)
    after_forward, peak = _measure(name, b, s, dtype, targets, recompute)
    predicted = act.activation_bytes(spec, b, s, e, 0, level, lora=1, lora_delta=delta)
    full_ft = act.activation_bytes(spec, b, s, e, 0, level)
    assert predicted == pytest.approx(after_forward, rel=0.05)
    assert abs(predicted - after_forward) <= abs(full_ft - after_forward)
    # LoRA's own gradients are tiny beside the activations: none counted here
    predicted_peak = training_step_peak_bytes(spec, b, s, e, 0, level, e, grad_fraction=0, lora=1, lora_delta=delta)
    assert predicted_peak == pytest.approx(peak, rel=0.05)


def test_mlp_only_adapters_free_the_first_norm_output_and_dropout_keeps_a_copy_and_a_mask():
    m = get_model("llama2-7b")
    b, s, e, h, f, T = 1, 2048, 2, 4096, 11008, 2048
    normalized = 2 * T * h * e  # each norm's normalized tensor: its frozen weight's gradient is not made
    assert act.lora_layer_delta_bytes(m, b, s, e, ATTENTION, 16) == -normalized - T * h * e - T * f * e + 4 * T * 16 * e
    assert act.lora_layer_delta_bytes(m, b, s, e, MLP, 16) == -normalized - T * h * e + 3 * T * 16 * e
    no_dropout = act.lora_layer_delta_bytes(m, b, s, e, wt.LINEAR_NAMES, 16)
    with_dropout = act.lora_layer_delta_bytes(m, b, s, e, wt.LINEAR_NAMES, 16, dropout=1)
    inputs = 3 * h + h + 2 * h + f  # q, k, v; o (its input is q_dim = h wide); gate, up; down
    # input dropout: every adapter keeps its own dropped copy and a byte mask, and the norms'
    # outputs and the last product are kept by nobody
    assert with_dropout - no_dropout == T * inputs * (e + 1) - 2 * T * h * e - T * f * e
    assert act.lora_layer_delta_bytes(m, b, s, e, (), 0) == 0
