"""The operators each family's decoder layer runs (op_costs.LAYER_ATEN_OPS), recounted on
transformers' own layers with torch.profiler: top-level aten calls of one forward. When a
transformers release changes a layer, this says which count to update."""
import dataclasses

import pytest

from llmdissect.perfmodel.op_costs import LAYER_ATEN_OPS, LLAMA_LAYER_ATEN_OPS
from llmdissect.specs import get_model

pytestmark = pytest.mark.slow  # builds a small model per family (about a second each)

PRESETS = {"llama": "llama2-7b", "mistral": "mistral-7b", "qwen2": "qwen2.5-7b", "qwen3": "qwen3-8b",
           "mixtral": "mixtral-8x7b",
           "qwen3_moe": "qwen3-30b-a3b", "olmoe": "olmoe-1b-7b", "deepseek_v3": "deepseek-v3",
           "gpt_oss": "gpt-oss-20b"}


def small(name: str):
    spec = get_model(name)
    changes = dict(hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=512, num_layers=2,
                   intermediate_size=128)
    if spec.is_moe:
        changes.update(num_experts=4, experts_per_token=2, expert_intermediate_size=32)
    if spec.is_mla:
        changes.update(num_kv_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                       v_head_dim=16, head_dim=24, first_dense_layers=1)
    if spec.sliding_window:
        changes["sliding_window"] = 8
    return dataclasses.replace(spec, name=f"{name}-ops", **changes)


def top_level_aten_ops(spec, layer_index: int, tokens: int = 4) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from llmdissect.modeling import build_model

    model = build_model(spec, attn="eager" if spec.model_type == "gpt_oss" else "sdpa").eval()
    layer = model.model.layers[layer_index]
    h = torch.randn(1, tokens, spec.hidden_size, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(tokens).unsqueeze(0)
    kw = dict(position_embeddings=model.model.rotary_emb(h, pos), attention_mask=None, position_ids=pos)
    with torch.no_grad():
        layer(h, **kw)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            layer(h, **kw)
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    return len([e for e in aten if not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))])


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_layer_operator_counts_match_transformers(family):
    spec = small(PRESETS[family])
    dense, moe = LAYER_ATEN_OPS[family]
    if spec.is_moe:
        assert top_level_aten_ops(spec, spec.num_layers - 1) == moe
    if dense:
        assert top_level_aten_ops(spec, 0) == dense
    assert LAYER_ATEN_OPS["llama"][0] == LLAMA_LAYER_ATEN_OPS
