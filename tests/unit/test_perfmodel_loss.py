"""`--loss unchunked|chunked|fused`: what the loss keeps and what its backward holds, against
the live tensors of real losses on this CPU, and the time terms' closed forms.

The three losses run here as their libraries write them: transformers' ForCausalLMLoss (the
whole logits upcast to fp32, one cross_entropy), torchtune's CEWithChunkedOutputLoss (the head
applied to 8 chunks of the hidden states, each upcast and cross-entropied on its own), and a
fused linear cross-entropy written as Liger-Kernel's FusedLinearCrossEntropy works (chunk by
chunk in the forward: logits, their softmax gradient, and the input's and weight's gradients,
which the backward only scales). The tracker counts storages allocated inside it: the hidden
states and the head's weight exist before, their gradients are counted when backward makes them.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from llmdissect.measure.memory import live_tensor_tracker  # noqa: E402
from llmdissect.perfmodel import activations as act  # noqa: E402
from llmdissect.perfmodel import layertime  # noqa: E402
from llmdissect.perfmodel import op_costs as opc  # noqa: E402
from llmdissect.specs import get_model  # noqa: E402
from llmdissect.specs.models import ModelSpec  # noqa: E402

B, S, H, V = 2, 256, 64, 8192


def _unchunked(x, w, labels):
    logits = x @ w.t()
    return F.cross_entropy(logits.float().view(-1, V), labels.view(-1))


def _chunked(x, w, labels):
    chunks = [c @ w.t() for c in x.chunk(act.LOSS_CHUNKS, dim=1)]
    total = sum(F.cross_entropy(c.float().reshape(-1, V), t.reshape(-1), reduction="sum")
                for c, t in zip(chunks, labels.chunk(act.LOSS_CHUNKS, dim=1)))
    return total / labels.numel()


class _FusedLinearCE(torch.autograd.Function):
    """Liger's scheme in torch: chunks of ceil(BT / ceil(V / H)) rows (to a power of two), each
    chunk's logits turned into their gradient in place, dX and dW made in the forward."""

    @staticmethod
    def forward(ctx, x, w, labels):
        flat, target = x.reshape(-1, H), labels.reshape(-1)
        grad_x, grad_w = torch.empty_like(flat), torch.zeros_like(w)
        total = torch.zeros((), dtype=torch.float32)
        rows = 1 << (math.ceil(flat.shape[0] / math.ceil(V / H)) - 1).bit_length()
        for i in range(0, flat.shape[0], rows):
            xi, ti = flat[i:i + rows], target[i:i + rows]
            g = xi @ w.t()
            lse = g.float().logsumexp(-1)
            total += (lse - g.gather(1, ti[:, None]).float()[:, 0]).sum()
            g.sub_(lse[:, None].to(g.dtype)).exp_()
            g[torch.arange(len(ti)), ti] -= 1
            g.div_(target.numel())
            grad_x[i:i + rows] = g @ w
            grad_w += g.t() @ xi
            del g
        ctx.save_for_backward(grad_x.view_as(x), grad_w)
        return total / target.numel()

    @staticmethod
    def backward(ctx, grad_out):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_out, grad_w * grad_out, None


def _fused(x, w, labels):
    return _FusedLinearCE.apply(x, w, labels)


def _measure(loss_fn, dtype):
    torch.manual_seed(0)
    x = torch.randn(B, S, H, dtype=dtype, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(V, H, dtype=dtype) * 0.02)
    labels = torch.randint(0, V, (B, S))
    tracker = live_tensor_tracker()
    with tracker:
        loss = loss_fn(x, w, labels)
        tracker._sweep()
        after_forward = tracker.current_bytes
        loss.backward()
    return after_forward, tracker.peak_bytes


def _spec() -> ModelSpec:
    return ModelSpec(name="loss-probe", hidden_size=H, intermediate_size=4 * H, num_layers=1, num_heads=4,
                     num_kv_heads=4, vocab_size=V, max_position_embeddings=S, tie_word_embeddings=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("loss", opc.LOSSES)
def test_loss_memory_matches_real_losses(loss, dtype):
    torch.set_num_threads(1)
    m, e, ix = _spec(), (4 if dtype == torch.float32 else 2), opc.LOSSES.index(loss)
    after_forward, peak = _measure({"unchunked": _unchunked, "chunked": _chunked, "fused": _fused}[loss], dtype)
    grads = B * S * H * e + V * H * e  # dX and the head's dW, made by the backward (fused: in the forward)
    kept = act.logits_bytes(m, B, S, e, ix) + (ix == 2) * V * H * e
    assert kept == pytest.approx(after_forward, rel=0.15)
    predicted_peak = kept + act.loss_transient_bytes(m, B, S, e, ix) + grads
    assert predicted_peak == pytest.approx(peak, rel=0.15)


def test_chunking_keeps_the_log_softmax_and_cuts_the_transients():
    m = get_model("llama3-8b")
    b, s, e = 1, 8192, 2
    logits = b * s * m.vocab_size
    assert act.logits_bytes(m, b, s, e, 1) == act.logits_bytes(m, b, s, e, 0) == 4 * logits + 8 * b * s
    assert act.loss_transient_bytes(m, b, s, e, 0) == 2 * 4 * logits
    # chunked: the 16-bit logits of all chunks and one chunk's fp32 copy, in the forward
    assert act.loss_transient_bytes(m, b, s, e, 1) == logits * (e + 4 / 8)
    assert act.loss_transient_bytes(m, b, s, 4, 1) == 4 * logits
    # fused: the input's gradient kept, a chunk of about b s h logits at once
    assert act.logits_bytes(m, b, s, e, 2) == act.loss_transient_bytes(m, b, s, e, 2) == b * s * m.hidden_size * e


def test_fused_loss_moves_the_heads_backward_into_the_forward():
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.specs.hardware import resolve_platform

    c = machine_for(resolve_platform("h100", 1), "bf16").ceilings
    m, tokens, e = get_model("llama3-8b"), 8192, 2
    fwd = [layertime.head_forward_time_s(c, m, tokens, e, loss=ix, bwd_gemms=2) for ix in range(3)]
    bwd = [layertime.head_backward_time_s(c, m, tokens, e, 1, 2, ix) for ix in range(3)]
    gemm = layertime._head_gemm_time_s(c, m, tokens, e)
    # fused: the forward holds the head and both backward products; its backward only scales dX
    assert fwd[2] - fwd[0] > 2 * gemm - layertime.memory_time_s(c, 4 * tokens * m.vocab_size)
    assert bwd[2] < 0.1 * bwd[0]
    # chunked: the same passes, each chunk's products and fixed costs paid on its own
    assert fwd[1] >= fwd[0] and bwd[1] >= bwd[0]
    assert fwd[1] + bwd[1] < 1.5 * (fwd[0] + bwd[0])
