"""`--held-logits`: a loop that keeps the model output holds its logits through backward.

Closed form: the held logits add b s V bytes an element to the step's peak (2 in bf16, 4 when
transformers 4.31-4.44 upcast them in the forward). Live tensors: the two loops run on this
CPU with a randomly initialised debug-llama in bf16, whose loss phase is its peak (a 1024
vocabulary over a 64-wide model), measured as test_perfmodel_activations measures them.
"""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel.request import estimate_request, run_estimate
from llmdissect.perfmodel.stepmemory import training_step_peak_bytes
from llmdissect.specs import get_model


def test_held_logits_add_their_bytes_to_the_loss_phase():
    m = get_model("llama2-7b")
    b, s, e = 6, 2048, 2
    level = act.RECOMPUTE_LEVEL["full"]
    base = training_step_peak_bytes(m, b, s, e, 0, level, e)
    for held, width in ((1, 2), (2, 4)):
        with_held = training_step_peak_bytes(m, b, s, e, 0, level, e, held_bytes=act.held_logit_bytes(held, e))
        assert with_held - base == b * s * m.vocab_size * width
    assert act.held_logit_bytes(0, e) == 0


def _finetune(**extra):
    opts = dict(model="llama2-7b", hardware="rtx3090", gpus=2, dtype="bf16", precision="pure", micro_batch=6,
                seq=2048, recompute="full", lora_rank=64, zero=3, store=False)
    opts.update(extra)
    kind = "finetune"
    req = estimate_request(kind, **{k: v for k, v in opts.items() if k != "store"})
    return run_estimate(req, None).metrics["memory"]["total_bytes"]


def test_estimate_grows_by_the_held_fp32_logits_and_refuses_them_with_a_fused_loss():
    m = get_model("llama2-7b")
    grown = _finetune(held_logits="fp32") - _finetune()
    # the loss phase is this step's peak; the framework allowance adds 5 % of the tensors
    assert grown == pytest.approx(6 * 2048 * m.vocab_size * 4 * 1.05, rel=1e-6)
    with pytest.raises(UserError, match="fused loss"):
        _finetune(held_logits="fp32", loss="fused")
    with pytest.raises(UserError):
        _finetune(held_logits="fp16")


def _measure_peak(held: str) -> int:
    torch = pytest.importorskip("torch")
    from llmdissect.measure.memory import live_tensor_tracker
    from llmdissect.modeling import build_model

    spec = get_model("debug-llama")
    model = build_model(spec, attn="sdpa", dtype="bf16", seed=0)
    model.train()
    ids = torch.randint(0, spec.vocab_size, (2, 128), generator=torch.Generator().manual_seed(0))
    tracker = live_tensor_tracker()
    with tracker:
        if held == "fp32":  # transformers 4.38's LlamaForCausalLM, the loop holding its output
            logits = model(input_ids=ids).logits.float()
            shifted = logits[..., :-1, :].contiguous()
            loss = torch.nn.functional.cross_entropy(shifted.view(-1, spec.vocab_size), ids[..., 1:].reshape(-1))
            del shifted
        else:
            output = model(input_ids=ids, labels=ids)
            loss = output.loss
        loss.backward()
    return tracker.peak_bytes


@pytest.mark.parametrize("held", ["compute", "fp32"])
def test_held_logits_match_a_real_step_that_keeps_the_output(held):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    spec = get_model("debug-llama")
    index = act.HELD_LOGITS.index(held)
    predicted = training_step_peak_bytes(spec, 2, 128, 2, 0, 0, 2, held_bytes=act.held_logit_bytes(index, 2))
    without = training_step_peak_bytes(spec, 2, 128, 2, 0, 0, 2)
    peak = _measure_peak(held)
    assert predicted == pytest.approx(peak, rel=0.10)
    assert abs(without - peak) > abs(predicted - peak)  # the held logits are what brings it there
