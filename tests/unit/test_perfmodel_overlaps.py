"""`--sp`, `--async-tp` and `--prefetch`: sequence parallelism's split of the replicated work and
memory, its collectives, the TP collectives hidden inside the products, and ZeRO-3's gathers
hidden behind the step but the first unit's (closed forms, and the CLI's refusals)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel import comm, layertime
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.request import build_estimate
from llmdissect.perfmodel.roofline import memory_time_s
from llmdissect.perfmodel.trainmodel import data_parallel_exposed_s
from llmdissect.specs import get_model
from llmdissect.specs.hardware import resolve_platform

FSDP_70B = dict(model="llama3-70b", hardware="h100", gpus=8, micro_batch=2, seq=4096, grad_accum=4, tp=2, zero=3,
                engine="fsdp", recompute="full", attn="flash", optimizer="adam", lora_rank=16, lora_targets="all",
                kernels="fused")


def _metrics(**over):
    return build_estimate("finetune", {**FSDP_70B, **over}).metrics


def test_sequence_parallel_collectives_move_the_all_reduce_bytes():
    # Korthikanti et al. (arXiv 2205.05198, 4.2.2): a ring all-reduce is a reduce-scatter then an
    # all-gather, so sequence parallelism moves the same bytes; it pays one more call's fixed cost
    net = comm.Network(bandwidth_bytes_per_s=400e9, alpha_s=1e-6, efficiency=0.8, base_s=5e-6)
    size, tp, layers, passes = 64 * 2**20, 4, 10, 3
    plain = comm.tensor_parallel_comm_s(net, size, tp, layers, passes)
    split = comm.tensor_parallel_comm_s(net, size, tp, layers, passes, sp=1)
    assert split - plain == pytest.approx(passes * 2 * layers * net.base_s)


def test_sequence_parallel_splits_the_norms_and_residual_adds():
    c = machine_for(resolve_platform("h100"), "bf16", {}).ceilings
    m, tokens, e, tp = get_model("llama3-8b"), 8192, 2, 4
    h = m.hidden_size
    replicated = 2 * opc.rmsnorm(tokens, h, e).bytes + 2 * opc.residual_add(tokens, h, e).bytes
    saved = layertime.layer_elementwise_time_s(c, m, tokens, e, tp, kernels=1) \
        - layertime.layer_elementwise_time_s(c, m, tokens, e, tp, kernels=1, sp=1)
    assert saved == pytest.approx(memory_time_s(c, replicated * (1 - 1 / tp), tokens), rel=1e-9)


@pytest.mark.parametrize("level", [0, 2, 3])
def test_sequence_parallel_splits_what_every_rank_saved_whole(level):
    m, b, s, e, tp = get_model("llama3-8b"), 1, 4096, 2, 4
    whole = {0: act.residual_bytes_per_layer(m, b, s, e) + 2 * act.rmsnorm_bytes(m, b, s, e),
             2: act.checkpointed_layer_bytes(m, b, s, e), 3: act.checkpointed_layer_bytes(m, b, s, e)}[level]
    cut = act.saved_layer_bytes(m, b, s, e, 0, level, tp) - act.saved_layer_bytes(m, b, s, e, 0, level, tp, sp=1)
    assert cut == pytest.approx(whole * (1 - 1 / tp))


def test_prefetch_exposes_only_the_first_gather_while_compute_lasts():
    # comm 10 s, backward 4 s, step compute 12 s, first unit's gathers 1 s, half hidden by default
    assert data_parallel_exposed_s(10.0, 4.0, 12.0, 1.0, 0.5) == pytest.approx(10 - 0.5 * 4)
    assert data_parallel_exposed_s(10.0, 4.0, 12.0, 1.0, 0.5, prefetch=1) == pytest.approx(1.0)
    # what outlasts the compute shows
    assert data_parallel_exposed_s(10.0, 4.0, 5.0, 1.0, 0.5, prefetch=1) == pytest.approx(1.0 + (9.0 - 5.0))


def test_options_move_the_estimate_the_way_they_should():
    base, sp, asy = _metrics(), _metrics(sp=True), _metrics(sp=True, async_tp=True)
    pre = _metrics(sp=True, async_tp=True, prefetch=True)
    # sequence parallelism: less element-wise work and memory, a little more collective overhead
    assert sp["memory"]["activations_bytes"] < base["memory"]["activations_bytes"]
    assert sp["time"]["forward_s"] < base["time"]["forward_s"]
    # async TP on NVLink at these shapes: the layers' products outlast their collectives
    tp_comm = sp["time"]["comm_s"] - asy["time"]["comm_s"]
    assert tp_comm > 0
    assert asy["time"]["step_s"] == pytest.approx(sp["time"]["step_s"] - tp_comm, rel=1e-9)
    assert pre["time"]["step_s"] < asy["time"]["step_s"]


@pytest.mark.parametrize("over,needle", [(dict(sp=True, tp=1, gpus=8), "--sp"),
                                         (dict(async_tp=True), "--async-tp"),
                                         (dict(prefetch=True, zero=2), "--prefetch")])
def test_options_refuse_what_they_cannot_act_on(over, needle):
    with pytest.raises(UserError, match=needle):
        build_estimate("finetune", {**FSDP_70B, **over})


def test_cli_refuses_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "llmdissect", "estimate", "finetune", "--model", "llama3-8b",
                           "--hardware", "h100", "--async-tp", "--no-store"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "--async-tp" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
