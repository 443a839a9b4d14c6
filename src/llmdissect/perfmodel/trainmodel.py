"""The training estimate as arithmetic on scalars or numpy arrays (estimate and advise share it).

Per device and per optimizer step of `grad_accum` micro-batches (arguments as
config.TrainSetup; choices as numbers: eager 0/1, recompute 0 none / 1 selective / 2 full,
offload 0 none / 1 optimizer / 2 params, lora 0/1):

    step = (m + (p - 1) / v) x t_micro             1F1B with its pipeline bubble (v model chunks a
                                                   device: the interleaved schedule)
           + exposed data-parallel / ZeRO comm     (overlap fraction hidden in backward)
           + optimizer (on device, or CPU Adam plus PCIe traffic when offloaded)
    t_micro = forward + backward (2x forward GEMMs for full training, 1x for a frozen base)
              + recomputed forward + TP all-reduces + pipeline sends
"""
from __future__ import annotations

from dataclasses import replace

import llmdissect.metric_names as mn
from llmdissect.perfmodel import activations as act
from llmdissect.perfmodel import comm, moe, states
from llmdissect.perfmodel import flops as fl
from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel import weights as wt
from llmdissect.perfmodel.ceilings import Machine
from llmdissect.perfmodel.layertime import (
    head_backward_time_s,
    head_forward_time_s,
    launch_bound,
    layer_adapter_time_s,
    layer_attention_backward_time_s,
    layer_attention_time_s,
    layer_float8_cast_time_s,
    layer_gemm_shapes,
    layer_gemm_time_s,
    layer_kernels_time_s,
    layer_op_recompute_time_s,
    model_param_tensors,
    op_policy_gemms,
)
from llmdissect.perfmodel.roofline import memory_time_s
from llmdissect.perfmodel.stepmemory import optimizer_step_transient_bytes, training_step_peak_bytes
from llmdissect.specs.models import ModelSpec


def framework_bytes(mach: Machine, tensors_bytes):
    """The named allowance for the framework: CUDA context plus allocator fragmentation on a
    GPU, none on a CPU (`mach.assumptions`: defaults.assumptions_for, overridable)."""
    a = mach.assumptions
    return a["framework_context_bytes"] + a["fragmentation_fraction"] * tensors_bytes


def train_memory(m: ModelSpec, mach: Machine, *, b, s, ga, e, eager, rc, zero, off, tp, pp, dp,
                 optimizer, lora, lora_params, frozen_weight_bytes, pure=0, ep=1, pp_virtual=1, loss=0, sp=0,
                 flat=0, head=0, held=0, lora_rank=0, lora_targets=(), lora_dropout=0):
    """Per-device memory (bytes) of a training step; dict of scalars or arrays. `pure` 1:
    16-bit weights, gradients and optimizer states, no fp32 master (states.py). Expert
    parallelism `ep` keeps 1/ep of the routed experts on each device (moe.py); `loss` an index
    into op_costs.LOSSES; `sp` 1 under sequence parallelism (activations.saved_layer_bytes);
    `flat` 1 where DeepSpeed's ZeRO optimizer runs (deepspeed_zero12_extra_bytes); `head` an
    index into op_costs.HEADS; `held` an index into activations.HELD_LOGITS (the logits the loop
    keeps through backward); under LoRA its rank, resolved targets and dropout (an index into
    op_costs.LORA_DROPOUTS) give what its layers save (activations.lora_layer_delta_bytes)."""
    shard = tp * pp
    routed = moe.routed_expert_params(m)
    # trainable parameters on this model shard: the dense part, which ZeRO partitions over the
    # dp ranks, and this rank's 1/ep of the routed experts, which only the dp / ep ranks that
    # hold the same experts can partition (DeepSpeed-MoE's expert data parallelism,
    # arXiv 2201.05596 section 5; Megatron-Core's expert_data_parallel group)
    psi_dense = lora * lora_params / shard + (1 - lora) * (m.params - routed) / shard
    psi_experts = (1 - lora) * routed / ep / shard
    edp = dp / ep
    working = 2 * m.params_per_layer / tp  # ZeRO-Infinity keeps the layers in use and the next prefetched
    p, g, o = states.offloaded_device_bytes(psi_dense, e, zero, dp, off, optimizer, working, pure)
    px, gx, ox = states.offloaded_device_bytes(psi_experts, e, zero, edp, off, optimizer, 0, pure)
    p, g, o = p + px, g + gx, o + ox
    # a frozen base (LoRA) is partitioned like the rest under ZeRO-3, and goes to the host with
    # the other parameters under params offload (FSDP's CPUOffload(offload_params=True), ZeRO-Infinity)
    frozen_local = frozen_partition_bytes(lora, frozen_weight_bytes, shard, zero, dp)
    frozen = frozen_local * (off < 2)
    params = p + frozen
    lora_delta = lora * act.lora_layer_delta_bytes(m, b, s, e, lora_targets, lora_rank, lora_dropout, tp)
    activations = act.activation_bytes(m, b, s, e, eager, rc, tp, pp, pp_virtual, loss, sp, head, lora, lora_delta)
    grad_fraction = (1 - lora) * (off < 1) / (1 + (zero >= 2) * (dp - 1)) / pp
    persistent = (ga > 1) * (zero < 2) * (off < 1) * (1 - lora)
    is_gpu = mach.platform.device.kind == "gpu"
    # the optimizer's partition on this device
    psi_opt = psi_dense / (1 + (zero >= 1) * (dp - 1)) + psi_experts / (1 + (zero >= 1) * (edp - 1))
    opt_tmp = optimizer_step_transient_bytes(m, psi_opt, is_gpu, (off < 1) * 1, 4 + pure * (e - 4))
    step_peak = training_step_peak_bytes(m, b, s, e, eager, rc, e, tp, persistent, grad_fraction,
                                         held_bytes=act.held_logit_bytes(held, e), optimizer_transient=opt_tmp,
                                         loss=loss, sp=sp, head=head, lora=lora, lora_delta=lora_delta, pp=pp,
                                         pp_virtual=pp_virtual) + lora * g
    master_clone, bucket = deepspeed_zero12_extra_bytes(m, e, zero, off, psi_opt, flat)
    o = o + master_clone
    # the engines' transients beside the step's tensors: DeepSpeed's gradient bucket, ZeRO-3's gathered units
    step_peak = step_peak + bucket \
        + (zero >= 3) * (off < 2) * zero3_gathered_bytes(m, e, tp, pp, dp, lora, frozen_weight_bytes)
    tensors = params + o + step_peak
    other = framework_bytes(mach, tensors)
    host = states.host_bytes_per_device(psi_dense, e, zero, dp, off, optimizer, pure) \
        + states.host_bytes_per_device(psi_experts, e, zero, edp, off, optimizer, pure) + frozen_local * (off >= 2)
    return {mn.PARAMS_BYTES: params, mn.GRADS_BYTES: g, mn.OPTIMIZER_BYTES: o, mn.ACTIVATIONS_BYTES: activations,
            "step_peak_bytes": step_peak, mn.OTHER_BYTES: other, mn.TOTAL_BYTES: tensors + other,
            "host_bytes": host}


DEEPSPEED_REDUCE_BUCKET = 5e8
"""DeepSpeed's default reduce_bucket_size, in elements (its zero config; `bench` caps it at the
model's parameters, engines/deepspeed_config.py)."""


def deepspeed_zero12_extra_bytes(m: ModelSpec, e, zero, off, psi_partition, flat=1):
    """What DeepSpeed's ZeRO-1/2 optimizer holds beyond the ZeRO paper's model states
    (deepspeed/runtime/zero/stage_1_and_2.py): (master, bucket).

    master: its partition cloned into the master dtype (single_partition_of_fp32_groups, a
    `.clone().to(fp32)` even where the model trains in fp32, whose states count no separate
    master), 4 bytes a partitioned parameter in fp32 training, on the device unless offloaded.
    bucket: setup_buckets' gradient staging buffer (contiguous_gradients, on by default) of
    reduce_bucket_size elements, fp32 under ZeRO-1 ("stages the fp32 accumulator") and the
    compute dtype under ZeRO-2; one buffer (overlap_comm is off by default below stage 3)."""
    on = flat * (zero >= 1) * (zero <= 2)
    master = on * (e >= 4) * (off < 1) * 4 * psi_partition
    elements = m.params + (DEEPSPEED_REDUCE_BUCKET - m.params) * (m.params > DEEPSPEED_REDUCE_BUCKET)
    bucket = on * elements * (4 + (zero == 2) * (e - 4))
    return master, bucket


def frozen_partition_bytes(lora, frozen_weight_bytes, shard, zero, dp):
    """This device's part of a frozen LoRA base: its model shard's, partitioned over the dp
    ranks under ZeRO-3 like the trainable parameters (0 without LoRA)."""
    return lora * frozen_weight_bytes / shard / (1 + (zero >= 3) * (dp - 1))


def zero3_gathered_bytes(m: ModelSpec, e, tp, pp, dp, lora=0, frozen_weight_bytes=0):
    """What ZeRO-3 / FSDP holds gathered beside its shard: the unit in use and the one prefetched
    (FSDP: "the peak memory includes the unsharded parameters of the current and the next
    FSDP unit", Zhao et al., arXiv 2304.11277, section 3.3; FSDP1's limit_all_gathers keeps two
    in flight), a decoder layer each, or the root's embedding and head with a layer, whichever
    is more; less the 1/dp of them the shard already holds. A frozen LoRA base gathers as it is
    stored (quantized under QLoRA; its embedding and head stay 16-bit)."""
    root = (m.params_embedding + m.params_head) * e
    layer = m.params_per_layer * e
    frozen_layer = (frozen_weight_bytes - root) / m.num_layers
    layer = layer + lora * (frozen_layer - layer)
    pair = 2 * layer + (root - layer) * (root > layer)  # max(two layers, root + a layer)
    return pair / (tp * pp) * (1 - 1 / dp)


def data_parallel_exposed_s(dp_comm, backward_s, compute_s, first_gathers_s, overlap, prefetch=0):
    """The data-parallel / sharding communication left on a step's critical path.

    Without prefetching, `overlap` of it hides behind the backward (the bucketed gradient
    reduction of DDP and ZeRO; defaults.assumptions_for). With explicit prefetching (`prefetch`
    1, ZeRO-3 / FSDP: each unit's all-gather issued while the unit before computes), all of it
    hides behind the step's compute `compute_s` but the first unit's all-gather of each pass
    (`first_gathers_s`: nothing runs before it) and what outlasts the compute: "this overlap
    method exposes only one DP communication chunk" (NeMo Framework user guide 24.12,
    "Communication Overlap", of Megatron's layer-wise parameter gathers)."""
    plain = comm.exposed_s(dp_comm, backward_s, overlap)
    rest = dp_comm - first_gathers_s
    rest = rest * (rest > 0)
    prefetched = first_gathers_s + comm.exposed_s(rest, compute_s, 1.0)
    return plain + prefetch * (prefetched - plain)


def train_time(m: ModelSpec, mach: Machine, *, b, s, ga, e, eager, rc, zero, off, tp, pp, dp,
               optimizer, lora, lora_params, frozen_weight_bytes, layer_weight_bytes, sharded_calls=1, flat=0,
               pure=0, ep=1, lora_rank=0, lora_targets=(), lora_dropout=0, fsdp=0, pp_virtual=1, cp=1,
               pp_flushes=1, loss=0, float8_scale=1.0, kernels=0, sp=0, async_tp=0, prefetch=0, head=0):
    """Per-step times (s), throughput and MFU; needs `mach.ceilings`. `layer_weight_bytes`
    is one decoder layer's weights as stored (quantized under QLoRA); `sharded_calls` how many
    collectives a sharded (ZeRO-2/3) pass splits its traffic into (one per wrapped layer
    for FSDP; config.TrainSetup.sharded_calls); `flat` 1 where the optimizer steps one flat
    partition and copies it back into the parameters (DeepSpeed ZeRO, TrainSetup.flat_optimizer);
    `fsdp` 1 where FSDP2 shards. Both engines' own copies around their collectives
    (op_costs.sharding_copies) run at the element-wise memory rate, a fixed cost per call.
    LoRA's adapters (`lora_rank`, resolved `lora_targets`, `lora_dropout` an index into
    op_costs.LORA_DROPOUTS) run beside the frozen layers in every pass at their roofline
    (layertime.layer_adapter_time_s); with no targets given, at their FLOPs alone.
    `pp_virtual` model chunks on each pipeline device (Megatron-LM's interleaved 1F1B) shrink the
    bubble and multiply the pipeline sends (comm.interleaved_bubble_micro_batches); `pp_flushes`
    separate pipelines a step pay the bubble each.
    Context parallelism `cp`: `s` is each device's chunk of the sequence (s / cp) and `dp` counts
    the cp ranks too (they hold the same weights and reduce their gradients together); the
    attention core sees the whole sequence, balanced over the cp ranks, its keys and values
    passed around the ring behind its compute (comm.ring_attention_bytes). `loss` an index into
    op_costs.LOSSES (layertime.head_forward_time_s). `float8_scale`: the device's FP8 peak over
    its compute dtype's where the layers' linears run in float8 (torchao's Float8Linear,
    tensor-wise): their products, forward and backward, at that multiple of the peak, plus the
    casts of their operands (layertime.layer_float8_cast_time_s); the head stays in the compute
    dtype (torchtitan's converter leaves `output` out), and 1 is no float8. `kernels` an index
    into op_costs.KERNELS (layertime.layer_elementwise_time_s).
    Sequence parallelism `sp` 1: the norms and residual adds run on 1/tp of the tokens and each
    TP all-reduce is an all-gather and a reduce-scatter (comm.tensor_parallel_comm_s);
    `async_tp` 1 (with `sp`): those collectives decomposed and overlapped with the products they
    feed and follow (Wang et al., "Overlap Communication with Dependent Computation via
    Decomposition", ASPLOS 2023, doi 10.1145/3567955.3567959; torch inductor's micro-pipelined
    async TP, torchtitan's and NeMo AutoModel's enable_async_tensor_parallel), so only what
    outlasts the layers' GEMMs shows. `prefetch` 1 (ZeRO-3 / FSDP): each unit's all-gather
    issued while the unit before computes (explicit prefetching; Zhao et al., arXiv 2304.11277,
    section 3.3), so the sharded collectives hide behind the whole step's compute but for the
    first unit's gather of each pass (data_parallel_exposed_s). `head` an index into
    op_costs.HEADS: the head's products and loss sharded or whole under TP, and a gathered
    head's fp32 logits all-gathered each micro-batch."""
    c, net = mach.ceilings, mach.network
    layers = m.num_layers / pp
    tokens = b * s
    float8 = float8_scale != 1.0
    redone_share = len(op_policy_gemms(m)[1]) / len(layer_gemm_shapes(m))  # the products "op" recomputes
    c_lin = replace(c, gemm_peak_scale=c.gemm_peak_scale * float8_scale) if float8 else c  # the layers' linears
    cast_fwd = float8 * layer_float8_cast_time_s(c, m, tokens, e, tp)
    cast_bwd = float8 * layer_float8_cast_time_s(c, m, tokens, e, tp, "bwd")
    t_kernels = layer_kernels_time_s(c_lin, m, b, s, e, eager, layer_weight_bytes, tp, by_length=True,
                                     kernels=kernels, sp=sp) + cast_fwd
    t_attn = layer_attention_time_s(c, m, b, s, e, eager, tp, by_length=True)
    t_attn_bwd = layer_attention_backward_time_s(c, m, b, s, e, eager, t_attn, tp, lora)
    if cp > 1:  # the attention of s / cp queries over all s keys: 1 / cp of the whole sequence's
        t_whole = layer_attention_time_s(c, m, b, s * cp, e, eager, tp, by_length=True)
        t_attn_bwd = layer_attention_backward_time_s(c, m, b, s * cp, e, eager, t_whole, tp, lora) / cp
        t_kernels, t_attn = t_kernels - t_attn + t_whole / cp, t_whole / cp
    t_layer = launch_bound(c, t_kernels, opc.layer_forward_ops(m))
    t_head = head_forward_time_s(c, m, tokens, e, tp, loss=loss, bwd_gemms=2 - lora, head=head)
    if len(lora_targets):
        adapter_fwd = lora * layers * layer_adapter_time_s(c, m, tokens, e, lora_rank, lora_targets, lora_dropout, tp)
        adapter_bwd = lora * layers * layer_adapter_time_s(c, m, tokens, e, lora_rank, lora_targets, lora_dropout, tp,
                                                            "bwd")
    else:
        adapter_fwd = 0.0
        adapter_bwd = lora * 6 * tokens * lora_params / shard_div(tp, pp) / (c.peak_flops_per_s * c.efficiency["gemm"])
    fwd = layers * t_layer + t_head + adapter_fwd
    # backward: activation gradients (1x forward) + weight gradients (1x) unless the base is frozen;
    # the attention core's at its own measured rate where bench ops timed its backward
    # each operator's backward is one autograd node: it pays the fixed cost once, not twice
    t_bwd = (2 - lora) * (t_kernels - cast_fwd - t_attn) + t_attn_bwd + cast_bwd
    bwd = layers * launch_bound(c, t_bwd, opc.layer_forward_ops(m)) \
        + head_backward_time_s(c, m, tokens, e, tp, 2 - lora, loss, head) + adapter_bwd
    # selective recomputation redoes only the attention core; "op" the GEMMs it did not save
    recompute = (rc == 2) * (layers * t_layer + adapter_fwd) \
        + (rc == 1) * layers * t_attn \
        + (rc == 3) * layers * (layer_op_recompute_time_s(c_lin, m, b, s, e, eager, layer_weight_bytes, tp, kernels,
                                                          sp)
                                + float8 * layer_float8_cast_time_s(c, m, tokens, e, tp, share=redone_share))
    act_bytes = tokens * m.hidden_size * e
    tp_comm = comm.tensor_parallel_comm_s(net, act_bytes, tp, layers, 2 + (rc == 2), sp)
    # async TP: the collectives run inside the products of the same passes (forward, the
    # recomputed forward, and the backward's activation- and weight-gradient products)
    gemm_passes = 1 + (rc == 2) + (2 - lora)
    gemm_window = gemm_passes * layers * layer_gemm_time_s(c_lin, m, tokens, e, layer_weight_bytes, tp)
    tp_comm = tp_comm - async_tp * (tp_comm - comm.exposed_s(tp_comm, gemm_window, 1.0))
    # a gathered head's fp32 logits, all-gathered once a micro-batch (on the last stage)
    tp_comm = tp_comm + (head == 1) * comm.collective_time_s(net, "all_gather", tokens * m.vocab_size * 4, tp) / pp
    pp_net = comm.pipeline_network(net, mach.scale_out, mach.node_devices, tp, pp)
    # a micro-batch crosses v x p - 1 stage boundaries instead of p - 1: v sends each way a device
    pp_comm = (pp > 1) * 2 * pp_virtual * comm.p2p_time_s(pp_net, act_bytes)
    # expert parallelism: dispatch and combine all-to-alls in each MoE layer, forward and backward
    ep_net = comm.group_network(net, mach.scale_out, mach.node_devices, ep, tp * pp)
    ep_comm = moe.all_to_all_time_s(ep_net, m, tokens, ep, e, m.moe_layers / pp, 4 + 2 * (rc == 2))
    # the sharding engine's own copies around its collectives; gloo has no native AVG
    local_params = m.params - moe.routed_expert_params(m) * (1 - 1 / ep)  # experts split over ep
    psi_shard = (lora * lora_params + (1 - lora) * local_params) / shard_div(tp, pp)
    frozen_shard = lora * frozen_weight_bytes / shard_div(tp, pp)
    copies = opc.sharding_copies(fsdp, flat, zero, dp, divides=int(mach.platform.device.kind == "cpu"))
    tensors = sum(count for count, _ in model_param_tensors(m)) / pp
    weight_bytes, grad_bytes = psi_shard * e + frozen_shard, psi_shard * e
    fwd = fwd + memory_time_s(c, 2 * copies.fwd_weights * weight_bytes) + copies.fwd_calls * tensors * c.op_fixed_s
    bwd = bwd + memory_time_s(c, 2 * (copies.bwd_weights * weight_bytes + copies.bwd_grads * grad_bytes)) \
        + copies.bwd_calls * tensors * c.op_fixed_s
    # the ring's transfers run behind the attention of the chunk in hand; what is longer shows
    cp_net = comm.group_network(net, mach.scale_out, mach.node_devices, cp, tp)
    ring = (cp > 1) * comm.p2p_time_s(cp_net, comm.ring_attention_bytes(m, b, s, e, tp, cp))
    # once in the forward, again where recomputation redoes the attention (full, selective), and
    # with the gradients in the backward
    ring_forwards = 1 + (rc == 2) + (rc == 1)
    cp_comm = layers * (ring_forwards * comm.exposed_s(ring, t_attn, 1.0) + comm.exposed_s(2 * ring, t_attn_bwd, 1.0))
    t_micro = fwd + bwd + recompute + tp_comm + pp_comm + ep_comm + cp_comm
    bubble = pp_flushes * comm.interleaved_bubble_micro_batches(pp, pp_virtual)
    compute = (ga + bubble) * t_micro
    dp_net = comm.group_network(net, mach.scale_out, mach.node_devices, dp, tp * pp)
    dp_comm = comm.data_parallel_comm_s(dp_net, zero, psi_shard * e, psi_shard * e + frozen_shard, dp, ga,
                                        calls=sharded_calls)
    first_gathers = ga * 2 * comm.collective_time_s(dp_net, "all_gather", (psi_shard * e + frozen_shard)
                                                    / sharded_calls, dp)
    exposed = data_parallel_exposed_s(dp_comm, ga * bwd, ga * (fwd + bwd + recompute), first_gathers,
                                      mach.assumptions["overlap_fraction"], prefetch)
    psi_local = psi_shard / (1 + (zero >= 1) * (dp - 1))
    shards = shard_div(tp, pp) * (1 + (zero >= 1) * (dp - 1))
    # a flat partition is one tensor of all the parameters, torch's optimizer sees each one
    per_tensor = optimizer_step_s(c, e, optimizer, model_param_tensors(m), shards, pure)
    one_flat = optimizer_step_s(c, e, optimizer, [(1, m.params)], shards, pure)
    per_param = lora * optimizer_step_s(c, e, optimizer, None, pure=pure) \
        + (1 - lora) * (flat * one_flat + (1 - flat) * per_tensor) \
        + flat * 2 * e / optimizer_stream_rate(c)  # the updated partition copied into the parameters
    on_device = psi_local * per_param
    host = mach.host_link
    host_bw = (host.bandwidth_bytes_per_s * host.efficiency) if host is not None else c.bytes_per_s()
    cpu_adam = host_optimizer_params(psi_local, dp * tp * pp, mach.node_devices) / mach.assumptions[
        "cpu_adam_params_per_s"] + psi_local * 2 * e / host_bw
    # params offload: each micro-batch's forward and backward fetch this device's partition from
    # the host, a frozen LoRA base included
    frozen_local = frozen_partition_bytes(lora, frozen_weight_bytes, shard_div(tp, pp), zero, dp)
    param_fetch = (off >= 2) * ga * 2 * (psi_local * e + frozen_local) / host_bw
    optimizer_s = (off < 1) * (on_device + optimizer_tensors(m, tensors, lora, len(lora_targets), flat, zero, dp, pp)
                               * c.optimizer_tensor_s) \
        + (off >= 1) * cpu_adam + memory_time_s(c, 2 * copies.opt_grads * grad_bytes)
    step = compute + exposed + optimizer_s + param_fetch
    tokens_per_s = tokens * ga * dp / step
    devices = dp * tp * pp
    mfpt = fl.model_flops_per_token(m, s * cp, lora * lora_params)
    hfpt = fl.hardware_flops_per_token(m, s * cp, rc, lora * lora_params)
    peak_total = c.peak_flops_per_s * c.gemm_peak_scale * devices  # the peak its products run at (fp16-accumulate)
    return {mn.TIME: {mn.STEP_S: step, mn.FORWARD_S: ga * fwd, mn.BACKWARD_S: ga * (bwd + recompute),
                      mn.OPTIMIZER_S: optimizer_s + param_fetch,
                      mn.COMM_S: ga * (tp_comm + pp_comm + ep_comm + cp_comm) + exposed,
                      "bubble_s": bubble * t_micro},
            mn.TOKENS_PER_S: tokens_per_s, mn.TOKENS_PER_S_PER_DEVICE: tokens_per_s / devices,
            mn.MFU: tokens_per_s * mfpt / peak_total, mn.HFU: tokens_per_s * hfpt / peak_total,
            mn.MODEL_FLOPS_PER_TOKEN: mfpt, "comm_total_s": dp_comm}


def optimizer_stream_rate(c) -> float:
    """The rate of the optimizer's passes to and from memory. Where `peak` measured the cached
    rate (a CPU), its copy bandwidth: torch's AdamW over tiny-llama's embedding and head
    (3.1 M elements each) inside a training loop moved its 80 bytes an element at 26 GB/s, the
    copy bandwidth of that minute 26-33 GB/s, while the element-wise rate of a model's small
    rows (efficiency["memory"]) was 11 GB/s. Else (a GPU, no calibration) the element-wise
    rate, as for every other pass over memory."""
    return c.memory_bandwidth_bytes_per_s if c.optimizer_cached_bytes_per_s else c.bytes_per_s()


def optimizer_step_s(c, e, optimizer, tensors, shard=1, pure=0):
    """Seconds per parameter of one optimizer step on the device (`tensors` and `shard` as
    op_costs.optimizer_spilled_fraction). A fused kernel, SGD: the fewest bytes at the
    streaming rate. torch's unfused AdamW runs its passes one after another, each at the rate
    of where its operands are: a tensor that spills the cache moves all of them at the
    streaming rate; one that fits moves its fewest bytes at the streaming rate (each element
    read from memory and written back once a step: a training step's forward and backward
    leave none of it in the cache) and the rest at the rate `peak` measured for passes in the
    cache. Where that rate was not measured, op_costs.optimizer_step_traffic_bytes_per_param
    (the fewest bytes for a cached tensor) at the streaming rate.
    Inside tiny-llama's training loop on one 2-core VM (b2 x 128), the 55 tensors that fit
    ran at 1.72 ns an element (with their per-tensor cost) and the two that spill at 3.08
    (2.56 alone); a copy bandwidth of 30 GB/s and a cached rate of 90 GB/s, as measured in
    those minutes, give 1.67 and 2.67."""
    stream, cached = optimizer_stream_rate(c), c.optimizer_cached_bytes_per_s
    if optimizer not in opc.UNFUSED_OPTIMIZERS or not cached:
        return opc.optimizer_step_traffic_bytes_per_param(e, optimizer, tensors, c.cache_bytes, shard, pure) / stream
    fewest_bytes = opc.optimizer_step_bytes_per_param(e, optimizer, pure)
    element = opc.optimizer_element_bytes(e, pure)
    passes = opc.ADAMW_UNFUSED_PASSES * element
    spilled = opc.optimizer_spilled_fraction(tensors, c.cache_bytes, shard, element)
    in_cache = fewest_bytes / stream + (passes - fewest_bytes) / cached
    return spilled * passes / stream + (1 - spilled) * in_cache


def host_optimizer_params(params_per_rank, devices, node_devices):
    """Parameters one host's CPU Adam updates in a step under optimizer offload: every rank
    of the node steps the fp32 partition it owns (DeepSpeed's stage_1_and_2.py and stage3.py
    under offload_optimizer: each rank's DeepSpeedCPUAdam over its own partition), all at
    once on the node's shared cores, whose rate defaults.CPU_ADAM_PARAMS_PER_S is (a whole
    server's, arXiv 2101.06840 Table 3). The node holds `node_devices` ranks (0: all
    `devices` on one), so a step spanning k nodes updates 1/k of the model per host, where
    the whole model went through one host before."""
    per_node = node_devices + (devices - node_devices) * (node_devices <= 0)
    ranks = devices + (per_node - devices) * (per_node < devices)
    return params_per_rank * ranks


def optimizer_tensors(m: ModelSpec, stage_tensors, lora, adapted, flat, zero, dp, pp):
    """Parameter tensors the optimizer steps on one rank, each paying the per-tensor cost
    (Ceilings.optimizer_tensor_s): LoRA's A and B per `adapted` projection per layer (bench
    finetune's default targets where none are resolved); one flat partition (DeepSpeed); a
    1/dp share of the tensors under ZeRO-1 (torch's ZeroRedundancyOptimizer hands out whole
    tensors); else the `stage_tensors` of the model's stage (FSDP2 keeps each parameter a tensor)."""
    adapters = 2 * (adapted or len(wt.LORA_TARGETS_DEFAULT)) * m.num_layers / pp
    dense = flat + (1 - flat) * stage_tensors / (1 + (zero == 1) * (dp - 1))
    return lora * adapters + (1 - lora) * dense


def shard_div(tp, pp):
    """Model shards across tensor and pipeline parallelism."""
    return tp * pp
