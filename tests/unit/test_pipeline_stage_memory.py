"""Under 1F1B pipeline parallelism the first and the last stage peak apart (stepmemory,
activations.activation_bytes): the first holds L layers' worth of saved activations (pp
micro-batches of L / pp layers; Korthikanti et al., arXiv 2205.05198, sec. 4.2.3) and no
logits, the last one micro-batch of its L / pp layers beside the logits and the loss. Before,
the step's peak added the whole loss to the first stage's layers, and the activations split
the logits over the stages."""
from __future__ import annotations

import pytest

from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel.stepmemory import training_step_peak_bytes
from llmdissect.specs import get_model

FULL = act.RECOMPUTE_LEVEL["full"]


def _phases(m, b, s, e, pp):
    saved = act.saved_layer_bytes(m, b, s, e, 0, FULL)
    full = act.layer_activation_bytes(m, b, s, e, 0)
    edges = act.embedding_output_bytes(m, b, s, e) + act.rope_table_bytes(m, s, e)
    logits = act.logits_bytes(m, b, s, e) + act.loss_transient_bytes(m, b, s, e)
    transient = act.layer_backward_extra_bytes(m, b, s, e, 0)
    last = m.num_layers / pp * saved + edges + act.rmsnorm_bytes(m, b, s, e) + logits
    first = (m.num_layers - 1) * saved + full + edges + transient
    return first, last


def test_a_large_vocabulary_puts_the_peak_on_the_last_stage():
    m = get_model("llama3-70b")  # 128K vocabulary: 8192 tokens of logits and loss, 12 bytes an element
    b, s, e, pp = 1, 8192, 2, 4
    first, last = _phases(m, b, s, e, pp)
    assert last > first
    # no gradients counted (grad_fraction 0) so the phases are the activations' alone
    assert training_step_peak_bytes(m, b, s, e, 0, FULL, e, grad_fraction=0, pp=pp) == pytest.approx(last)
    one_stage = training_step_peak_bytes(m, b, s, e, 0, FULL, e, grad_fraction=0)
    assert one_stage == pytest.approx(last + (m.num_layers - m.num_layers / pp) * act.saved_layer_bytes(
        m, b, s, e, 0, FULL))


def test_a_small_vocabulary_puts_it_on_the_first_stage_and_interleaving_adds_chunks():
    m = get_model("llama2-70b")  # 32K vocabulary, 2048 tokens: the first stage's layers weigh more
    b, s, e, pp = 1, 2048, 2, 8
    first, last = _phases(m, b, s, e, pp)
    assert first > last
    assert training_step_peak_bytes(m, b, s, e, 0, FULL, e, grad_fraction=0, pp=pp) == pytest.approx(first)
    saved = act.saved_layer_bytes(m, b, s, e, 0, FULL)
    interleaved = training_step_peak_bytes(m, b, s, e, 0, FULL, e, grad_fraction=0, pp=pp, pp_virtual=2)
    assert interleaved - first == pytest.approx(m.num_layers * (pp - 1) / (pp * 2) * saved)
    # what the forward leaves alive: the larger stage's, the logits whole on the last
    kept = act.activation_bytes(m, b, s, e, 0, FULL, pp=pp)
    assert kept == pytest.approx(m.num_layers * saved + act.embedding_output_bytes(m, b, s, e)
                                 + act.rmsnorm_bytes(m, b, s, e) + act.rope_table_bytes(m, s, e))
