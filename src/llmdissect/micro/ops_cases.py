"""The operators of one Llama decoder layer (plus embedding, head, loss, AdamW and the
quantized matmuls) at a model's real shapes, as timed callables with their FLOPs and bytes.

Each case builds its tensors only when asked (`make()`), from a fixed seed (random, never
zeros), and returns the function the loop times. A backward case runs the forward once
and times `torch.autograd.grad(..., retain_graph=True)` alone.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmdissect.perfmodel import op_costs as opc
from llmdissect.specs.models import ModelSpec

SDPA_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION"}


@dataclass
class OpCase:
    op: str
    shape: str
    passes: str
    """fwd | bwd | step (the optimizer)"""
    cls: str
    """gemm | experts | attention | memory | optimizer | quant (the roofline class it calibrates)"""
    cost: opc.Cost
    make: Callable[[], Callable[[], Any]]
    dtype: str = ""
    rows_per_expert: int | None = None
    """Routed-expert rows: the tokens each expert gets (the grouped-GEMM efficiency's x)."""
    tokens: int | None = None
    """A layer element-wise operator's tokens (the element-wise efficiency's x)."""
    seq: int | None = None
    """An attention case's sequence length (the attention efficiency's x)."""


class Maker:
    """Random tensors on one device from one generator."""

    def __init__(self, device: str, dtype: Any, seed: int):
        import torch

        self.torch, self.device, self.dtype = torch, device, dtype
        self.gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(self, *shape: int, grad: bool = False, dtype: Any = None, scale: float = 1.0) -> Any:
        t = (self.torch.randn(*shape, generator=self.gen) * scale).to(self.device, dtype or self.dtype)
        return t.requires_grad_(grad)

    def ids(self, n: int, high: int) -> Any:
        return self.torch.randint(0, high, (n,), generator=self.gen).to(self.device)


def _timed(fwd: Callable[[], Any], passes: str, inputs: Callable[[], list[Any]], m: Maker) -> Callable[[], Any]:
    """The forward itself, or the backward of one retained forward graph."""
    if passes == "fwd":
        return fwd
    out = fwd()
    grad_out = None if out.dim() == 0 else m.randn(*out.shape, dtype=out.dtype)
    ins = inputs()
    return lambda: m.torch.autograd.grad(out, ins, grad_out, retain_graph=True)


def linear_case(m_: Callable[[], Maker], name: str, T: int, k: int, n: int, e: float, passes: str) -> OpCase:
    def make():
        m = m_()
        x, w = m.randn(T, k, grad=passes == "bwd"), m.randn(n, k, grad=passes == "bwd", scale=k ** -0.5)
        return _timed(lambda: m.torch.nn.functional.linear(x, w), passes, lambda: [x, w], m)
    return OpCase(name, f"[{T},{k}]x[{k},{n}]", passes, "gemm", opc.linear(T, k, n, e, passes), make)


def attention_case(m_: Callable[[], Maker], spec: ModelSpec, b: int, s: int, e: float, passes: str,
                   backend: str) -> OpCase:
    a, g, d = spec.num_heads, spec.num_kv_heads, spec.head_dim

    def make():
        m = m_()
        torch = m.torch
        F = torch.nn.functional
        q = m.randn(b, a, s, d, grad=passes == "bwd")
        k, v = m.randn(b, g, s, d, grad=passes == "bwd"), m.randn(b, g, s, d, grad=passes == "bwd")
        if backend == "eager":  # as transformers' eager_attention_forward: repeat kv, mask, fp32 softmax
            mask = torch.full((s, s), float("-inf"), device=m.device).triu(1).to(m.dtype)

            def fwd():
                kk, vv = k.repeat_interleave(a // g, 1), v.repeat_interleave(a // g, 1)
                w = torch.matmul(q, kk.transpose(2, 3)) * d ** -0.5 + mask  # [b, a, s, s]
                return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), vv)
            return _timed(fwd, passes, lambda: [q, k, v], m)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kernel = getattr(SDPBackend, SDPA_BACKENDS[backend])
        with sdpa_kernel([kernel]):
            fwd = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), passes,
                         lambda: [q, k, v], m)
            fwd()  # raises here, not in the timed loop, where the backend cannot run these inputs

        def run():
            with sdpa_kernel([kernel]):
                return fwd()
        return run
    return OpCase(f"attention {backend}", f"b{b} s{s} h{a}/{g} d{d}", passes, "attention",
                  opc.attention(b, s, a, g, d, e, passes), make, seq=s)


def elementwise_cases(m_: Callable[[], Maker], spec: ModelSpec, T: int, e: float, passes: str,
                      softmax_s: int) -> list[OpCase]:
    h, f, V, d = spec.hidden_size, spec.intermediate_size, spec.vocab_size, spec.head_dim
    qd, kvd, a = spec.q_dim, spec.kv_dim, spec.num_heads
    bwd = passes == "bwd"

    def rmsnorm():
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        m = m_()
        norm = LlamaRMSNorm(h, spec.rms_norm_eps).to(m.device, m.dtype)
        norm.weight.data.copy_(m.randn(h, scale=0.1) + 1)
        x = m.randn(T, h, grad=bwd)
        return _timed(lambda: norm(x), passes, lambda: [x, norm.weight], m)

    def rope():
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        m = m_()
        q, k = m.randn(1, spec.num_heads, T, d, grad=bwd), m.randn(1, spec.num_kv_heads, T, d, grad=bwd)
        cos, sin = m.randn(1, T, d), m.randn(1, T, d)
        return _timed(lambda: _cat(m, apply_rotary_pos_emb(q, k, cos, sin)), passes, lambda: [q, k], m)

    def swiglu():
        m = m_()
        gate, up = m.randn(T, f, grad=bwd), m.randn(T, f, grad=bwd)
        return _timed(lambda: m.torch.nn.functional.silu(gate) * up, passes, lambda: [gate, up], m)

    def softmax():
        m = m_()
        x = m.randn(1, a, softmax_s, softmax_s, grad=bwd)
        return _timed(lambda: m.torch.softmax(x, dim=-1), passes, lambda: [x], m)

    def embedding():
        m = m_()
        table, ids = m.randn(V, h, grad=bwd), m.ids(T, V)
        return _timed(lambda: m.torch.nn.functional.embedding(ids, table), passes, lambda: [table], m)

    def loss():
        m = m_()
        logits, target = m.randn(T, V, grad=bwd, dtype=m.torch.float32), m.ids(T, V)
        return _timed(lambda: m.torch.nn.functional.cross_entropy(logits, target), passes, lambda: [logits], m)

    return [
        OpCase("embedding", f"[{T}] of [{V},{h}]", passes, "memory", opc.embedding(T, V, h, e, passes), embedding),
        OpCase("rmsnorm", f"[{T},{h}]", passes, "memory", opc.rmsnorm(T, h, e, passes), rmsnorm, tokens=T),
        OpCase("rope", f"q [{T},{qd}] k [{T},{kvd}]", passes, "memory", opc.rope(T, qd, kvd, d, e, passes), rope,
               tokens=T),
        OpCase("softmax", f"[1,{a},{softmax_s},{softmax_s}]", passes, "memory",
               opc.softmax(a * softmax_s, softmax_s, e, passes), softmax),
        OpCase("silu x gate", f"[{T},{f}]", passes, "memory", opc.swiglu(T, f, e, passes), swiglu, tokens=T),
        OpCase("cross-entropy", f"[{T},{V}] fp32", passes, "memory", opc.cross_entropy(T, V, passes), loss,
               dtype="fp32"),
    ]


def layer_elementwise_cases(m_: Callable[[], Maker], spec: ModelSpec, T: int, e: float) -> list[OpCase]:
    """A decoder layer's own element-wise operators (RMSNorm, RoPE, SwiGLU), forward, at T
    tokens: the points of the element-wise efficiency by token count."""
    return [c for c in elementwise_cases(m_, spec, T, e, "fwd", 16) if c.tokens]


def routed_tokens_per_expert(tokens: int, spec: ModelSpec) -> int:
    """Tokens one routed expert receives from `tokens` under uniform routing: T k / E (at least 1)."""
    return max(1, round(tokens * spec.experts_per_token / spec.num_experts))


def moe_cases(m_: Callable[[], Maker], spec: ModelSpec, T: int, e: float, passes: str) -> list[OpCase]:
    """A MoE layer's own operators: the router's linear over all tokens; the routed experts
    as the model runs them, transformers' own experts module of this family (its default
    implementation: grouped GEMMs) called with uniform random routing of the T tokens to
    their k experts, so each expert gets about T k / E of them; and the shared experts, an
    ordinary MLP of width num_shared x fe over all tokens. Costs from the operator table:
    every expert's SwiGLU MLP over T k / E tokens."""
    h, E, fe = spec.hidden_size, spec.num_experts, spec.expert_intermediate_size
    cases = [linear_case(m_, "router", T, h, E, e, passes)]
    for tokens in sorted({T, max(1, T // 8)}, reverse=True):  # the grouped GEMMs' efficiency falls with rows
        cases.append(_routed_experts_case(m_, spec, tokens, e, passes))
    shared = spec.num_shared_experts * fe
    if shared:
        cases += [linear_case(m_, "shared gate_up", T, h, 2 * shared, e, passes),
                  linear_case(m_, "shared down", T, shared, h, e, passes)]
    return cases


def _routed_experts_case(m_: Callable[[], Maker], spec: ModelSpec, T: int, e: float, passes: str) -> OpCase:
    """transformers' experts module of the family over T tokens routed uniformly at random."""
    h, E, fe, k = spec.hidden_size, spec.num_experts, spec.expert_intermediate_size, spec.experts_per_token
    Te, bwd = routed_tokens_per_expert(T, spec), passes == "bwd"

    def experts():
        m = m_()
        torch = m.torch
        module = _experts_module(spec).to(m.device, m.dtype)
        for p in module.parameters():
            p.data.copy_(m.randn(*p.shape, scale=h ** -0.5))
            p.requires_grad_(bwd)
        x = m.randn(T, h, grad=bwd)
        scores = torch.rand(T, E, generator=m.gen).to(m.device)
        idx = scores.topk(k, dim=-1).indices  # k distinct experts per token, uniformly at random
        weights = torch.full((T, k), 1.0 / k, device=m.device, dtype=m.dtype)
        return _timed(lambda: module(x, idx, weights), passes, lambda: [x, *module.parameters()], m)

    lin = [opc.linear(Te, h, 2 * fe, e, passes), opc.linear(Te, fe, h, e, passes), opc.swiglu(Te, fe, e, passes)]
    cost = opc.Cost(E * sum(c.flops for c in lin), E * sum(c.bytes for c in lin))
    return OpCase("routed experts", f"{E} x [{Te},{h}] mlp {fe}", passes, "experts", cost, experts,
                  rows_per_expert=Te)


def _experts_module(spec: ModelSpec) -> Any:
    """One MoE layer's routed experts as transformers builds them for this family."""
    from llmdissect.modeling import build_model

    meta = build_model(spec, meta=True)
    layer = meta.model.layers[spec.num_layers - 1]  # the last layer is a MoE one in every family
    cls = type(layer.mlp.experts)
    config = meta.config
    del meta
    return cls(config)


def _cat(m: Maker, pair: tuple[Any, Any]) -> Any:
    """One output for both rotated tensors (the backward needs a single root)."""
    q, k = pair
    return m.torch.cat([q.flatten(), k.flatten()])


def layer_param_shapes(spec: ModelSpec) -> list[tuple[int, ...]]:
    """The parameters of one decoder layer (biases left out, as in Llama)."""
    h, f, qd, kvd = spec.hidden_size, spec.intermediate_size, spec.q_dim, spec.kv_dim
    return [(qd, h), (kvd, h), (kvd, h), (h, qd), (f, h), (f, h), (h, f), (h,), (h,)]


def adamw_case(m_: Callable[[], Maker], spec: ModelSpec) -> OpCase:
    shapes = layer_param_shapes(spec)
    params = sum(_prod(s) for s in shapes)

    def make():
        m = m_()
        ps = [m.randn(*s, grad=True, dtype=m.torch.float32, scale=0.02) for s in shapes]
        for p in ps:
            p.grad = m.randn(*p.shape, dtype=m.torch.float32, scale=1e-3)
        return m.torch.optim.AdamW(ps, lr=1e-4).step
    return OpCase("adamw step", f"{len(shapes)} tensors, {params} params (one layer)", "step", "optimizer",
                  opc.adamw(params), make, dtype="fp32")


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out
