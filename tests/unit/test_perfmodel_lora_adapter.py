"""LoRA's adapter path priced at its roofline (op_costs.lora_adapter, layertime.layer_adapter_time_s)."""
import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.layertime import layer_adapter_time_s
from llmdissect.perfmodel.request import estimate_for, estimate_request
from llmdissect.perfmodel.roofline import Ceilings
from llmdissect.perfmodel.weights import LINEAR_NAMES, resolve_lora_targets
from llmdissect.specs import get_model


def test_adapter_bytes_and_flops_by_hand():
    T, k, n, r, e = 8, 16, 32, 4, 2
    fwd = opc.lora_adapter(T, k, n, r, e)
    # X read; the adapter's output written; the sum reads both outputs and writes Y; H four times; A and B
    assert fwd.bytes == e * T * k + e * T * n + 3 * e * T * n + 4 * e * T * r + e * r * (k + n)
    assert fwd.flops == 2 * T * r * (k + n)
    bwd = opc.lora_adapter(T, k, n, r, e, "bwd")
    # dY twice; X; dX's share written and summed with the base's; H and dH six times; A, B and their grads
    assert bwd.bytes == 2 * e * T * n + 5 * e * T * k + 6 * e * T * r + 2 * e * r * (k + n)
    assert bwd.flops == 2 * fwd.flops
    # dropout reads and writes the tensor it acts on and its 1-byte mask, in each pass
    for dropout, width in ((1, k), (2, n)):
        for passes in ("fwd", "bwd"):
            base = opc.lora_adapter(T, k, n, r, e, passes).bytes
            extra = opc.lora_adapter(T, k, n, r, e, passes, dropout).bytes - base
            assert extra == (2 * e + 1) * T * width


def test_adapters_are_memory_bound_and_split_under_tp():
    m = get_model("llama3-8b")
    c = Ceilings(peak_flops_per_s=989e12, memory_bandwidth_bytes_per_s=3.35e12,
                 efficiency={"gemm": 0.7, "memory": 0.8, "attention": 0.5})
    targets = resolve_lora_targets(m, LINEAR_NAMES)
    t1 = layer_adapter_time_s(c, m, 8192, 2, 16, targets)
    traffic = sum(opc.lora_adapter(8192, i, o, 16, 2).bytes
                  for o, i in [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096),
                               (14336, 4096), (14336, 4096), (4096, 14336)])
    assert t1 == pytest.approx(traffic / (3.35e12 * 0.8))
    t2 = layer_adapter_time_s(c, m, 8192, 2, 16, targets, tp=2)
    assert t1 / 2 < t2 < t1  # each projection keeps one of its two activations whole
    assert layer_adapter_time_s(c, m, 8192, 2, 16, targets, dropout=2) > t1


def _finetune(**kw):
    options = dict(model="llama3-8b", hardware="h100", gpus=1, micro_batch=2, seq=4096, grad_accum=16,
                   lora_rank=16, lora_targets="all", attn="flash")
    options.update(kw)
    model = options.pop("model")
    return estimate_for(estimate_request("finetune", model=model, **options), get_model(model), {})


def test_dropout_on_the_output_costs_time_and_is_a_config_key():
    plain, dropped = _finetune(), _finetune(lora_dropout="output")
    assert dropped.metrics["time"]["step_s"] > plain.metrics["time"]["step_s"]
    assert dropped.config["lora_dropout"] == "output" and "lora_dropout" not in plain.config


def test_bad_dropout_options_are_user_errors():
    with pytest.raises(UserError, match="lora-dropout"):
        _finetune(lora_dropout="middle")
    with pytest.raises(UserError, match="give --lora-rank"):
        _finetune(lora_rank=0, lora_dropout="input")
