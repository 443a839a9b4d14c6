"""The peak of a training step's tensors: activations and gradients meet in backward.

Summing activations and gradients overstates the peak: gradients appear while backward
frees activations. Walking backward at layer granularity (one device, transformers' Llama;
a loop that keeps only the loss, `loss = model(**batch).loss`, frees the logits after the
forward; one that keeps the model output holds them, `held_bytes` an element, 2 or 4 when
upcast in the forward, activations.held_logit_bytes):

- loss:  every saved activation + what the loss keeps + its transients (activations.
         loss_transient_bytes; a fused loss also the head's gradients, made in its forward);
- layer i (L-1 .. 0): saved activations of layers below i, layer i's own activations (kept,
  or rebuilt by recomputation), gradients of the head, the final norm and layers above i,
  layer i's gradients and its transient gradient buffers;
- end:   every gradient (embedding included) (and the held logits), plus the optimizer
         step's temporaries (`optimizer_step_transient_bytes`).

Each layer is alike, so the maximum over i lies at i = L-1 or i = 0. Gradients that persist
across micro-batches (gradient accumulation) are added to every phase. Functions take
scalars or numpy arrays.
"""
from __future__ import annotations

from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel.op_costs import head_shards
from llmdissect.specs.models import ModelSpec


def _max(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + (x - out) * (x > out)
    return out


def training_step_peak_bytes(m: ModelSpec, b, s, e, eager, recompute_level, grad_bytes_per_param,
                             tp=1, persistent_grads=0, grad_fraction=1.0, held_bytes=0, optimizer_transient=0,
                             loss=0, sp=0, head=0, lora=0, lora_delta=0, pp=1, pp_virtual=1):
    """Peak bytes of activations plus gradients over one forward and backward.

    `grad_bytes_per_param` is the gradient dtype size; `grad_fraction` the share of each
    gradient this device keeps (1 / dp under ZeRO-2/3, 0 when offloaded); `persistent_grads`
    1 when gradients live through the forward (accumulation over micro-batches); `loss` an
    index into op_costs.LOSSES (what the loss keeps and its backward's transients); `sp` 1
    under sequence parallelism (activations.saved_layer_bytes); `head` an index into
    op_costs.HEADS (a vocabulary-parallel loss splits the logits' tensors over tp); `lora` 1
    with `lora_delta` what a LoRA layer saves beyond a full one (activations.lora_layer_delta_bytes).

    Under 1F1B pipeline parallelism (`pp` > 1) the stages peak apart, and the device that peaks
    highest is the answer: the first stage holds L layers' worth (pp micro-batches of L / pp
    layers; interleaved over `pp_virtual` chunks, L (1 + (p - 1) / (p v)), arXiv 2205.05198
    sec. 4.2.3) and no logits; the last stage one micro-batch of its L / pp layers beside the
    logits and the loss (it runs each micro-batch's backward right after its forward).
    """
    g = grad_bytes_per_param * grad_fraction / tp
    g_layer = m.params_per_layer * g
    g_head = (m.params_head + m.hidden_size) * g
    g_all = m.params * g
    full_layer = act.layer_activation_bytes(m, b, s, e, eager, tp, selective=(recompute_level == 1) * 1, sp=sp) \
        + lora_delta
    saved = act.saved_layer_bytes(m, b, s, e, eager, recompute_level, tp, sp) + (recompute_level < 2) * lora_delta
    edges = (act.embedding_output_bytes(m, b, s, e) + act.rope_table_bytes(m, s, e)
             + act.eager_mask_bytes(m, b, s, e, eager, recompute_level))
    final_norm = act.rmsnorm_bytes(m, b, s, e) + act.lora_final_norm_delta_bytes(m, b, s, e, lora)
    split = head_shards(head, tp)[1]  # a vocabulary-parallel loss holds 1/tp of the logits' tensors
    logits = act.logits_bytes(m, b, s, e, loss) / split
    held = held_bytes * b * s * m.vocab_size / split  # the logits, while the caller keeps the output
    transient = act.layer_backward_extra_bytes(m, b, s, e, eager, tp)
    first_layers = m.num_layers * (1 + (pp_virtual > 1) * (pp - 1) / (pp * pp_virtual))
    last_layers = m.num_layers / pp
    held_first = held * (pp == 1)  # the first stage holds no logits unless it is the last too
    # a fused loss makes the head's gradients in the forward (its weight's, where it trains)
    loss = last_layers * saved + edges + final_norm + logits + held \
        + act.loss_transient_bytes(m, b, s, e, loss) / split + (loss == 2) * g_head
    top = (first_layers - 1) * saved + full_layer + edges + held_first + g_head + g_layer + transient
    top_last = (last_layers - 1) * saved + full_layer + edges + held + g_head + g_layer + transient
    bottom = full_layer + edges + held_first + g_head + m.num_layers * g_layer + transient
    end = g_all + held + optimizer_transient
    return _max(loss, top, top_last, bottom, end) + persistent_grads * g_all


def optimizer_step_transient_bytes(m: ModelSpec, psi_local, is_gpu: bool, on_device=1, state_bytes=4):
    """Temporaries of torch's AdamW step beside the gradients. On CUDA the default `foreach`
    implementation builds sqrt(v) for every parameter of its partition at once (`state_bytes`
    per parameter: 4 for fp32 states); on a CPU the per-parameter loop holds two temporaries of
    the largest tensor (sqrt(v) and its scaled copy). Zero when the optimizer runs on the host
    (`on_device` 0); DeepSpeed's fused Adam would need none."""
    largest = max(m.vocab_size * m.hidden_size, m.hidden_size * m.intermediate_size, m.q_dim * m.hidden_size)
    smaller = psi_local + (largest - psi_local) * (largest < psi_local)  # min, for arrays too
    per_device = state_bytes * psi_local if is_gpu else 2 * smaller * state_bytes
    return on_device * per_device
