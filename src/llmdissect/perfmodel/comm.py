"""Communication time: the alpha-beta model of ring collectives (Thakur, Rabenseifner and
Gropp, IJHPCA 2005; the busbw factors of nccl-tests).

A ring collective over n ranks on links of bandwidth B (one direction, per device) with
per-step latency alpha moves, per device:

    all_reduce      2 (n-1) steps, 2 (n-1)/n x S bytes   (reduce-scatter then all-gather)
    all_gather      (n-1) steps,   (n-1)/n x S bytes     (S = the gathered output)
    reduce_scatter  (n-1) steps,   (n-1)/n x S bytes     (S = the input)
    send/recv       1 step,        S bytes

so t = base + steps x alpha + volume / (B x eff): a fixed cost per call (`base_s`, the
launch and protocol set-up) plus a small cost per ring step (`alpha_s`), as NCCL's own
tuning model has it (src/graph/tuning.cc: baseLat + nsteps x hwLat; defaults.py). Where
the calibration profile holds a measured fit for the operation (`time_s = alpha_s +
beta_s_per_byte x size_bytes`, nccl-tests' size) at the same rank count, that fit is used
instead. One rank (n = 1) costs nothing. Scalars or numpy arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llmdissect.perfmodel.defaults import DEFAULT_COLLECTIVE_LATENCY_S

FACTORS = {"all_reduce": (2.0, 2.0), "all_gather": (1.0, 1.0), "reduce_scatter": (1.0, 1.0)}
"""op -> (latency steps per (n - 1), bytes moved per (n - 1)/n x S)."""


@dataclass(frozen=True)
class Network:
    """The links collectives run over: bandwidth, latency, and measured fits by op."""

    bandwidth_bytes_per_s: float
    alpha_s: float
    """Latency of one ring step."""
    efficiency: float = 0.8
    fits: dict = field(default_factory=dict)
    """op -> (alpha_s, beta_s_per_byte, nproc) measured by `bench comm`; a fit stands in for
    the ring model only at the rank count it was measured with (nproc 0: any)."""
    base_s: float = 0.0
    """Fixed cost of one collective call, whatever the number of ranks."""


def link_family(link_kind: str) -> str:
    """The latency family of a link kind: `nvswitch-nvlink4` -> nvswitch, `pcie4-x16` -> pcie,
    `ib-hdr` / `roce` -> net, `cpu`; anything else -> default."""
    kind = link_kind.lower()
    for family in ("nvswitch", "nvlink", "pcie", "cpu"):
        if kind.startswith(family):
            return family
    if kind.startswith(("ib", "infiniband", "roce", "ethernet", "eth", "net")):
        return "net"
    return "default"


def default_latency_s(link_kind: str) -> tuple[float, float]:
    """(base_s per call, alpha_s per ring step) of a link kind (defaults.DEFAULT_COLLECTIVE_LATENCY_S)."""
    return DEFAULT_COLLECTIVE_LATENCY_S[link_family(link_kind)]


def collective_time_s(net: Network, op: str, size_bytes, n, calls=1):
    """Time of one ring collective of nccl-tests size `size_bytes` over `n` ranks, or of
    `calls` collectives that move those bytes between them (each pays the fixed cost)."""
    steps, volume = FACTORS[op]
    single = (n <= 1) * 1
    ring = (n - 1) / (n + single)  # n = 1 gives 0 (and never divides by zero)
    model = (1 - single) * calls * (net.base_s + steps * (n - 1) * net.alpha_s) \
        + volume * ring * size_bytes / (net.bandwidth_bytes_per_s * net.efficiency)
    if op not in net.fits:
        return model
    alpha, beta, nproc = net.fits[op]
    measured = (1 - single) * (calls * alpha + beta * size_bytes)
    use = (n == nproc) * 1 if nproc else 1
    return use * measured + (1 - use) * model


def group_network(intra: Network, scale_out: Network | None, node_devices, group, inner):
    """The network a collective of `group` ranks runs over, where each node holds
    `node_devices` and the group's members sit `inner` ranks apart (the model-parallel ranks,
    tp x pp, are placed first within a node, as Megatron-LM and torchtitan place them).

    Within a node it is `intra`. A group that spans nodes has k = node_devices / inner of
    its members in each node, each with its own NIC (one per GPU, "rail-optimized" as in the
    DGX reference designs); NCCL runs one ring per NIC, so the node forwards k NICs' worth of
    ring traffic: the ring's bus bandwidth is min(intra, k x NIC) (NCCL's multi-ring
    all-reduce, Jeaugey, GTC 2017 "NCCL 2.0"; nccl-tests' busbw over nodes). A call across
    nodes pays the network's latency. Scalars or numpy arrays (advise's grids)."""
    if scale_out is None or not node_devices:
        return intra
    per_node = node_devices // inner
    per_node = per_node + (1 - per_node) * (per_node < 1)  # a model replica wider than a node: one NIC
    return _across(intra, scale_out, per_node, (group * inner > node_devices) * (group > 1))


def _across(intra: Network, scale_out: Network, nics, spans) -> Network:
    """`intra`, or where `spans` (0/1) the node network with `nics` NICs a node: bandwidth
    min(intra, nics x NIC) and the node network's latency."""
    nic = nics * scale_out.bandwidth_bytes_per_s
    across = intra.bandwidth_bytes_per_s + (nic - intra.bandwidth_bytes_per_s) * (nic < intra.bandwidth_bytes_per_s)
    return Network(intra.bandwidth_bytes_per_s + spans * (across - intra.bandwidth_bytes_per_s),
                   intra.alpha_s + spans * (scale_out.alpha_s - intra.alpha_s), intra.efficiency, intra.fits,
                   intra.base_s + spans * (scale_out.base_s - intra.base_s))


def pipeline_network(intra: Network, scale_out: Network | None, node_devices, tp, pp):
    """The link between pipeline stages: `intra` while tp x pp ranks fit in a node, else the
    node network, whose tp ranks each send their 1/tp share of the activations through their
    own NIC (Megatron-LM's scatter/gather, arXiv 2104.04473 section 4.1): min(intra, tp x NIC)."""
    if scale_out is None or not node_devices:
        return intra
    spans = (tp * pp > node_devices) * (pp > 1)
    return _across(intra, scale_out, tp, spans)


def p2p_time_s(net: Network, size_bytes):
    """One point-to-point transfer (pipeline stages): base + alpha + S / B."""
    return net.base_s + net.alpha_s + size_bytes / (net.bandwidth_bytes_per_s * net.efficiency)


def data_parallel_comm_s(net: Network, stage, grad_bytes, weight_bytes, dp, micro_batches, calls=1):
    """Per optimizer step, the ZeRO paper's communication (arXiv 1910.02054, section 7):

    stage 0/1: one all-reduce of the gradients after accumulation (2 Psi volume);
    stage 2:   a reduce-scatter of gradients per micro-batch, one all-gather of the updated
               parameters per step;
    stage 3:   per micro-batch an all-gather of the parameters in forward and again in
               backward, and a reduce-scatter of the gradients (3 Psi: 1.5x data parallel).

    A sharded stage splits each pass's traffic into `calls` collectives (FSDP: one per wrapped
    layer and one for the root), each paying the fixed cost of a call.
    """
    ar = collective_time_s(net, "all_reduce", grad_bytes, dp)
    rs = collective_time_s(net, "reduce_scatter", grad_bytes, dp, calls)
    ag = collective_time_s(net, "all_gather", weight_bytes, dp, calls)
    s01 = (stage <= 1) * ar
    s2 = (stage == 2) * (micro_batches * rs + ag)
    s3 = (stage >= 3) * micro_batches * (2 * ag + rs)
    return s01 + s2 + s3


def tensor_parallel_comm_s(net: Network, activation_bytes, tp, layers, passes, sp=0):
    """Megatron-LM (arXiv 1909.08053): two all-reduces of the b x s x h activations per layer
    per pass (forward, backward, and a recomputed forward). Sequence parallelism (`sp` 1;
    Korthikanti et al., arXiv 2205.05198, section 4.2.2) replaces each all-reduce by an
    all-gather and a reduce-scatter: the same bytes, two calls' fixed costs."""
    ar = collective_time_s(net, "all_reduce", activation_bytes, tp)
    ag_rs = collective_time_s(net, "all_gather", activation_bytes, tp) \
        + collective_time_s(net, "reduce_scatter", activation_bytes, tp)
    return passes * 2 * layers * (ar + sp * (ag_rs - ar))


def pipeline_bubble_fraction(pp, micro_batches):
    """1F1B / GPipe bubble: (p - 1) / (m + p - 1) of the step is idle (arXiv 1806.03377,
    2104.04473)."""
    return (pp - 1) / (micro_batches + pp - 1)


def interleaved_bubble_micro_batches(pp, virtual=1):
    """The pipeline bubble of 1F1B, in micro-batch times: p - 1 with one model chunk a device,
    (p - 1) / v with v chunks a device (Megatron-LM's interleaved schedule; Narayanan et al.,
    arXiv 2104.04473, sec. 2.2.2: bubble time (p - 1)(t_f + t_b) / v, with v times the
    point-to-point communication)."""
    return (pp - 1) / virtual


def ring_attention_bytes(m, b, s_local, e, tp, cp):
    """What one device receives per layer in a context-parallel attention forward: the keys and
    values of the other cp - 1 sequence chunks, b x s / cp tokens each, passed around the ring
    (ring attention, Liu et al., arXiv 2310.01889; Megatron-Core's and torchtitan's context
    parallelism). The backward passes them again with their gradients: twice the bytes."""
    return (cp - 1) * b * s_local * 2 * m.num_kv_heads * m.head_dim / tp * e


def exposed_s(comm_s, compute_s, overlap):
    """Communication left on the critical path when `overlap` of it hides behind compute."""
    hidden = overlap * (comm_s + (compute_s - comm_s) * (compute_s < comm_s))
    return comm_s - hidden
