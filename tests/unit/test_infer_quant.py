"""Quantization toggles on debug-llama: real torchao and bitsandbytes, weights measurably smaller."""
import pytest

from llmdissect.errors import UserError
from llmdissect.techniques.quantization import (
    QUANT_METHODS,
    apply_quantization,
    unsupported_reason,
    weight_bytes,
    weight_bytes_read_per_step,
)

CPU_METHODS = [q for q in QUANT_METHODS if q not in ("none", "int4-weight")]


@pytest.fixture(scope="module")
def spec():
    from llmdissect.specs import get_model

    return get_model("debug-llama")


def _model(spec):
    from llmdissect.modeling import build_model

    return build_model(spec, seed=0).eval()


def test_unquantized_bytes_match_the_spec(spec):
    model = _model(spec)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # rotary inv_freq
    assert weight_bytes(model) == 4 * spec.params + buffers
    assert weight_bytes_read_per_step(model) == weight_bytes(model) - 4 * spec.params_embedding


@pytest.mark.slow
@pytest.mark.parametrize("quant", CPU_METHODS)
def test_quantized_weights_are_smaller_and_still_generate(spec, quant):
    import torch

    model = _model(spec)
    before = weight_bytes(model)
    linear_fp32 = 4 * spec.num_layers * (spec.params_attention_per_layer + spec.params_mlp_per_layer)
    apply_quantization(model, quant)
    after = weight_bytes(model)
    # the decoder's linear weights go from 4 bytes to 1 (int8) or 0.5 (nf4) per value, plus scales
    saved = before - after
    assert saved > 0.6 * linear_fp32, (quant, before, after)
    assert type(model.model.layers[0].mlp.up_proj.weight).__name__ != "Parameter"
    assert type(model.lm_head.weight).__name__ == "Parameter"  # the head stays in the compute dtype
    ids = torch.randint(0, spec.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3,
                             do_sample=False, pad_token_id=0)
    assert out.shape == (2, 11)


def test_unsupported_combinations_have_reasons():
    assert "CUDA" in unsupported_reason("int4-weight", "cpu", "fp32")
    assert "bf16" in unsupported_reason("int4-weight", "cuda", "fp32")
    assert unsupported_reason("int4-weight", "cuda", "bf16") is None
    assert unsupported_reason("int8-weight", "cpu", "fp32") is None
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        apply_quantization(object(), "int4-weight", device="cpu")
    with pytest.raises(UserError, match="unknown quantization"):
        unsupported_reason("fp3", "cpu", "fp32")
