"""LoRA parameter counts vs peft, KV-cache bytes vs transformers' DynamicCache (real models)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmdissect.modeling import build_model  # noqa: E402
from llmdissect.perfmodel import kvcache  # noqa: E402
from llmdissect.perfmodel.weights import LINEAR_NAMES, lora_params  # noqa: E402
from llmdissect.specs import get_model  # noqa: E402


@pytest.mark.parametrize("name", ["debug-llama", "tiny-llama"])
@pytest.mark.parametrize("rank,targets", [(8, ("q_proj", "v_proj")), (16, LINEAR_NAMES), (4, ("o_proj", "down_proj"))])
def test_lora_params_match_peft(name, rank, targets):
    from peft import LoraConfig, get_peft_model

    spec = get_model(name)
    model = build_model(spec, meta=True)  # peft counts shapes; the meta device allocates nothing
    peft_model = get_peft_model(model, LoraConfig(r=rank, target_modules=list(targets)))
    trainable, _ = peft_model.get_nb_trainable_parameters()
    assert lora_params(spec, rank, targets) == trainable


@pytest.mark.parametrize("name,batch,seq", [("debug-llama", 3, 37), ("tiny-llama", 2, 64)])
def test_kv_cache_bytes_match_a_real_forward(name, batch, seq):
    from transformers import DynamicCache

    spec = get_model(name)
    model = build_model(spec).eval()
    ids = torch.randint(0, spec.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True)
    real = sum(t.untyped_storage().nbytes() for layer in cache.layers for t in (layer.keys, layer.values))
    assert real == kvcache.kv_cache_bytes(spec, batch, seq, 4)


def test_kv_cache_after_generate_holds_input_plus_output_minus_one():
    spec = get_model("debug-llama")
    model = build_model(spec).eval()
    ids = torch.randint(3, spec.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=9, min_new_tokens=9, do_sample=False, return_dict_in_generate=True,
                             pad_token_id=0)
    cache = getattr(out, "cache", None) or out.past_key_values
    real = sum(layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
               for layer in cache.layers)
    assert real == kvcache.kv_cache_bytes(spec, 2, kvcache.generate_positions(20, 9), 4)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_inference_memory_matches_a_real_generate(attn):
    """Weights + KV cache + the prefill working set vs the peak of live tensors of generate."""
    from llmdissect.measure.memory import live_tensor_tracker
    from llmdissect.perfmodel.weights import model_weight_bytes

    spec = get_model("tiny-llama")
    model = build_model(spec, attn=attn).eval()
    ids = torch.randint(3, spec.vocab_size, (4, 96), generator=torch.Generator().manual_seed(0))
    tracker = live_tensor_tracker()
    with torch.inference_mode(), tracker:
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert weights == model_weight_bytes(spec, "none", 4)
    predicted = (weights + kvcache.kv_cache_bytes(spec, 4, kvcache.generate_positions(96, 8), 4)
                 + kvcache.prefill_working_bytes(spec, 4, 96, 4, int(attn == "eager")))
    assert predicted == pytest.approx(weights + tracker.peak_bytes, rel=0.05)
