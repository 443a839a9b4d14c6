"""Devices in more than one node: data-parallel groups that span nodes run over the node network
at min(NVLink, k NICs) (comm.group_network), pipeline sends at min(NVLink, tp NICs); no torch."""
from __future__ import annotations

import numpy as np
import pytest

from llmdissect.perfmodel import comm
from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.config import TrainSetup
from llmdissect.perfmodel.estimate import estimate_train
from llmdissect.specs import get_model, resolve_platform

NVLINK = comm.Network(300e9, 0.47e-6, 0.8, base_s=3.6e-6)
NIC = comm.Network(25e9, 2.7e-6, 0.8, base_s=3.6e-6)  # one 200 Gb/s HDR port per A100 (DGX A100)


@pytest.mark.parametrize("group, inner, want", [
    (8, 1, 300e9),        # one node: NVLink
    (16, 1, 200e9),       # 8 ranks a node, 8 NICs: min(300, 8 x 25)
    (32, 4, 50e9),        # tp 4: 2 ranks of the group a node, 2 NICs
    (4, 16, 25e9),        # a model replica wider than a node: one NIC
    (1, 16, 300e9),       # a group of one never communicates
])
def test_group_network_is_the_narrowest_of_nvlink_and_the_nodes_nics(group, inner, want):
    net = comm.group_network(NVLINK, NIC, 8, group, inner)
    assert net.bandwidth_bytes_per_s == pytest.approx(want)
    spans = want != 300e9
    assert net.alpha_s == (NIC.alpha_s if spans else NVLINK.alpha_s)


def test_group_network_takes_advises_arrays():
    net = comm.group_network(NVLINK, NIC, 8, np.array([8, 16, 32]), np.array([1, 1, 4]))
    assert np.allclose(net.bandwidth_bytes_per_s, [300e9, 200e9, 50e9])


def test_pipeline_sends_leave_the_node_through_tp_nics():
    assert comm.pipeline_network(NVLINK, NIC, 8, 8, 1).bandwidth_bytes_per_s == 300e9
    assert comm.pipeline_network(NVLINK, NIC, 8, 4, 2).bandwidth_bytes_per_s == 300e9  # 8 ranks: one node
    assert comm.pipeline_network(NVLINK, NIC, 8, 4, 4).bandwidth_bytes_per_s == pytest.approx(100e9)
    assert comm.pipeline_network(NVLINK, None, 8, 4, 4) is NVLINK


def test_machine_has_a_node_network_only_past_one_node():
    assert machine_for(resolve_platform("a100", 8), "bf16").scale_out is None
    wide = machine_for(resolve_platform("a100", 16), "bf16")
    assert wide.scale_out.bandwidth_bytes_per_s == 25e9 and wide.node_devices == 8
    assert "ib-hdr" in wide.sources["scale_out"]
    assert machine_for(resolve_platform("h100", 16), "bf16").scale_out.bandwidth_bytes_per_s == 50e9
    assert machine_for(resolve_platform("rtx4090", 16), "bf16").scale_out is None  # no reference node


def test_fsdp_across_nodes_pays_the_nic_closed_form():
    # ZeRO-3, one micro-batch: 2 all-gathers and 1 reduce-scatter of the bf16 weights, each
    # (n-1)/n x S over the ring's bandwidth (nccl-tests' busbw); plus a fixed cost per call.
    m = get_model("llama2-7b")
    comm_s = {}
    for n in (8, 16):
        mach = machine_for(resolve_platform("a100", n), "bf16")
        est = estimate_train(TrainSetup(kind="pretrain", model=m, platform=mach.platform, zero=3, engine_name="fsdp",
                                        micro_batch=1, seq=2048), mach)
        comm_s[n] = est.metrics["comm_total_s"]
    volume = 3 * 2 * m.params
    bw = {8: 300e9 * 0.8, 16: 200e9 * 0.8}
    for n in (8, 16):
        assert comm_s[n] == pytest.approx(volume * (n - 1) / n / bw[n], rel=0.02)
