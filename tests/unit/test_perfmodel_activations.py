"""The activation-memory formula vs the live tensors of real training steps on this CPU.

Measured with `measure.memory.live_tensor_tracker()` around one forward and backward of a
randomly initialised debug-llama / tiny-llama (fp32, and debug-llama in bf16: its norms
keep fp32 copies and its residuals are freed, paths fp32 does not take), eager and SDPA attention, with no,
full (transformers' gradient checkpointing) and torchtitan's per-operator ("op") recomputation.

Baseline: the tracker counts storages that operators allocate inside the context, so the
parameters, the batch and (with `set_to_none`) no gradients exist before it: the baseline
is zero, and the weights are added by neither side. (Views such as the transposed weight
each matmul takes share their input's storage and are not allocations; before the tracker
ignored them it counted every linear weight once more, params_matmul x e bytes.)

Two checks per case: the bytes alive when the forward ends (activations + the loss's
log-softmax, `activations.activation_bytes`) and the peak over forward and backward
(`stepmemory.training_step_peak_bytes`), each within 15 %.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmdissect.measure.memory import live_tensor_tracker  # noqa: E402
from llmdissect.modeling import build_model  # noqa: E402
from llmdissect.perfmodel import activations as act  # noqa: E402
from llmdissect.perfmodel.stepmemory import training_step_peak_bytes  # noqa: E402
from llmdissect.specs import get_model  # noqa: E402
from llmdissect.techniques.recompute import apply_recompute  # noqa: E402

CASES = [("debug-llama", 4, 256, "fp32"), ("tiny-llama", 1, 256, "fp32"), ("debug-llama", 2, 128, "bf16")]


def _measure(name: str, b: int, s: int, attn: str, recompute: str, dtype: str) -> tuple[int, int]:
    spec = get_model(name)
    model = build_model(spec, attn=attn, dtype=dtype, seed=0)
    model.train()
    apply_recompute(model, recompute)
    ids = torch.randint(0, spec.vocab_size, (b, s), generator=torch.Generator().manual_seed(0))
    tracker = live_tensor_tracker()
    with tracker:
        loss = model(input_ids=ids, labels=ids).loss  # a training loop keeps the loss, not the logits
        tracker._sweep()
        after_forward = tracker.current_bytes
        loss.backward()
    return after_forward, tracker.peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name,b,s,dtype", CASES)
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("recompute", ["none", "full", "op"])
def test_activation_formula_matches_real_training_step(name, b, s, dtype, attn, recompute):
    torch.set_num_threads(1)
    spec = get_model(name)
    e = 4 if dtype == "fp32" else 2
    baseline = 0  # see the module docstring
    eager, level = int(attn == "eager"), act.RECOMPUTE_LEVEL[recompute]
    after_forward, peak = _measure(name, b, s, attn, recompute, dtype)
    predicted_forward = act.activation_bytes(spec, b, s, e, eager, level) + baseline
    predicted_peak = training_step_peak_bytes(spec, b, s, e, eager, level, e) + baseline
    assert predicted_forward == pytest.approx(after_forward, rel=0.15)
    assert predicted_peak == pytest.approx(peak, rel=0.15)


def test_flash_and_sdpa_keep_no_square_buffer_and_eager_does():
    m = get_model("llama2-7b")
    eager = act.layer_activation_bytes(m, 1, 4096, 2, 1)
    fused = act.layer_activation_bytes(m, 1, 4096, 2, 0)
    scores = m.num_heads * 4096 * 4096 * (4 + 2)  # fp32 softmax + its bf16 copy
    lse = m.num_heads * 4096 * 4  # the fused kernel's log-sum-exp, all it keeps per row
    assert eager - fused == scores - lse  # llama2-7b has no GQA: no repeated k/v
    selective = act.layer_activation_bytes(m, 1, 4096, 2, 1, selective=1)
    assert eager - selective == scores
    full = act.saved_layer_bytes(m, 1, 4096, 2, 0, 2)
    assert full == 4096 * m.hidden_size * 2


def test_op_policy_saves_every_other_matmul_and_the_attention():
    # torchtitan's policy on a Llama layer saves q, v, gate and down (the 1st, 3rd, 5th and
    # 7th matmul) and the fused attention's output and log-sum-exp, beside the layer's input
    m = get_model("llama2-7b")
    b, s, e, h, f = 1, 4096, 2, m.hidden_size, m.intermediate_size
    want = b * s * e * (h + h + h + f + h) + b * s * h * e + m.num_heads * s * 4
    assert act.saved_layer_bytes(m, b, s, e, 0, act.RECOMPUTE_LEVEL["op"]) == want


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-moe", "tiny-mla"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_moe_and_mla_activations_match_real_training_step(name, recompute):
    """The routed tokens (k copies in, k outputs, the experts' k x f activations), the
    router's logits, q/k norms and MLA's projections; torchtitan's "op" policy is not
    modelled for MoE layers (it over-predicts their saved bytes by about a quarter)."""
    torch.set_num_threads(1)
    spec = get_model(name)
    level = act.RECOMPUTE_LEVEL[recompute]
    after_forward, peak = _measure(name, 2, 128, "sdpa", recompute, "fp32")
    assert act.activation_bytes(spec, 2, 128, 4, 0, level) == pytest.approx(after_forward, rel=0.15)
    assert training_step_peak_bytes(spec, 2, 128, 4, 0, level, 4) == pytest.approx(peak, rel=0.15)
