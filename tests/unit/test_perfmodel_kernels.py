"""`--kernels eager|fused`: the bytes an eager element-wise module moves, counted operator by
operator on the real modules (transformers' Llama), and the eager / fused ratio of a training
step held against torchtitan's published torch.compile speed-up."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import layertime
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.request import build_estimate
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform
from llmdissect.specs.models import ModelSpec

T, H, HEADS, KV_HEADS, D, F = 256, 512, 8, 2, 64, 1408


def _aten_bytes(fn, *args) -> int:
    """Bytes each aten operator reads and writes (its tensor inputs and outputs), views left out."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Count(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            shared = {t.untyped_storage().data_ptr() for t in ins}
            if not any(o.untyped_storage().data_ptr() in shared for o in outs):  # a view moves nothing
                Count.total += sum(t.numel() * t.element_size() for t in ins + outs)
            return out

    with torch.no_grad(), Count():
        fn(*args)
    return Count.total


@pytest.mark.parametrize("dtype,e", [("bfloat16", 2), ("float32", 4)])
def test_eager_module_bytes_match_their_operators(dtype, e):
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    dt = getattr(torch, dtype)
    norm = LlamaRMSNorm(H).to(dt)
    x = torch.randn(1, T, H, dtype=dt)
    assert _aten_bytes(norm, x) == pytest.approx(opc.rmsnorm_eager_bytes(T, H, e), rel=0.05)

    q, k = torch.randn(1, HEADS, T, D, dtype=dt), torch.randn(1, KV_HEADS, T, D, dtype=dt)
    cos, sin = torch.randn(1, T, D, dtype=dt), torch.randn(1, T, D, dtype=dt)
    got = _aten_bytes(apply_rotary_pos_emb, q, k, cos, sin)
    # the formula leaves out cos and sin, which every operator that takes them reads from cache
    tables = 2 * 2 * T * D * e * 2  # cos and sin, read by a product for q and one for k
    assert got - tables == pytest.approx(opc.rope_eager_bytes(T, HEADS * D, KV_HEADS * D, e), rel=0.05)

    gate, up = torch.randn(T, F, dtype=dt), torch.randn(T, F, dtype=dt)
    assert _aten_bytes(lambda g, u: torch.nn.functional.silu(g) * u, gate, up) == opc.swiglu_eager_bytes(T, F, e)


def test_fused_modules_move_less_and_gpt_layers_are_the_same():
    c = machine_for(resolve_platform("h100", 1), "bf16").ceilings
    m = get_model("llama3-8b")
    eager = layertime.layer_elementwise_time_s(c, m, 8192, 2, kernels=0)
    fused = layertime.layer_elementwise_time_s(c, m, 8192, 2, kernels=1)
    assert 2.5 < eager / fused < 3.5
    # a GPT layer's LayerNorm and GELU are one operator each: nothing to fuse
    gpt = ModelSpec(name="gpt-probe", hidden_size=1024, intermediate_size=4096, num_layers=2, num_heads=16,
                    num_kv_heads=16, vocab_size=50257, max_position_embeddings=2048, model_type="gpt")
    assert layertime.layer_elementwise_time_s(c, gpt, 2048, 2, kernels=0) == \
        layertime.layer_elementwise_time_s(c, gpt, 2048, 2, kernels=1)


def test_eager_over_fused_matches_torchtitans_compile_speedup():
    # torchtitan, benchmarks/llama3_h100_202412_torchtitan.md, Table 1 (Llama 3.1 8B, 8 H100s,
    # FSDP, local batch 2, selective activation checkpointing): FSDP 5,762 TPS/GPU, FSDP +
    # torch.compile 6,667, a speed-up of 1.157
    options = dict(model="llama3-8b", hardware="h100", gpus=8, zero=3, seq=8192, micro_batch=2, attn="sdpa",
                   recompute="op", engine="fsdp")
    eager = build_estimate("pretrain", options).metrics["tokens_per_s_per_device"]
    fused = build_estimate("pretrain", dict(options, kernels="fused")).metrics["tokens_per_s_per_device"]
    assert fused / eager == pytest.approx(6667 / 5762, rel=0.05)


def test_kernels_key_only_when_fused():
    options = dict(model="llama3-8b", hardware="h100", seq=2048)
    assert "kernels" not in build_estimate("pretrain", options).config
    assert build_estimate("pretrain", dict(options, kernels="fused")).config["kernels"] == "fused"


def test_measured_elementwise_efficiency_is_kept():
    # a CPU whose bench ops timed the eager modules prices them as measured, whatever --kernels says
    from dataclasses import replace

    c = machine_for(resolve_platform("h100", 1), "bf16").ceilings
    measured = replace(c, memory_efficiency_by_tokens=((64, 0.3), (4096, 0.5)))
    m = get_model("llama3-8b")
    assert layertime.layer_elementwise_time_s(measured, m, 1024, 2, kernels=0) == \
        layertime.layer_elementwise_time_s(measured, m, 1024, 2, kernels=1)
