"""Model-state bytes per device: parameters, gradients, optimizer states, under ZeRO.

The ZeRO paper (Rajbhandari et al., arXiv 1910.02054, section 3 and figure 1): with mixed
precision Adam every parameter costs 2 bytes (fp16/bf16 weight) + 2 (gradient) + K = 12
(fp32 master weight, momentum, variance) = 16 Psi. Partitioned over N data-parallel ranks:

    stage 0: 16 Psi            stage 1: 4 Psi + 12 Psi / N
    stage 2: 2 Psi + 14 Psi/N  stage 3: 16 Psi / N

In fp32 the weight and gradient are 4 bytes each and Adam keeps m and v (8), 16 Psi again.
"Pure" 16-bit training (`pure` 1: torchtune's dtype=bf16 recipes, which build the model in
bf16 and hand its parameters to torch's AdamW) keeps no fp32 master and the states in the
parameters' dtype: 2 + 2 + 2 x 2 = 8 bytes per parameter for AdamW.
Offload (ZeRO-Offload, arXiv 2101.06840; ZeRO-Infinity, arXiv 2104.07857) moves the
optimizer states (and the fp32 gradients they update) to CPU memory, or with `params` the
partitioned parameters too, leaving on the device a working set of the layers being used.

Functions take scalars or numpy arrays; `stage` is an integer 0..3.
"""
from __future__ import annotations

OFFLOADS = ("none", "optimizer", "params")
PRECISIONS = ("mixed", "pure")


def weight_bytes_per_param(dtype_bytes):
    """The training copy of a weight: the compute dtype (2 for bf16/fp16, 4 for fp32)."""
    return dtype_bytes


def grad_bytes_per_param(dtype_bytes):
    """Gradients are kept in the compute dtype (ZeRO paper: fp16 gradients)."""
    return dtype_bytes


def optimizer_bytes_per_param(dtype_bytes, optimizer: str = "adamw", pure=0):
    """Optimizer state per parameter. Adam(W): the ZeRO paper's K = 12 under mixed precision
    (fp32 master + m + v); 8 in fp32 (m, v; the weight is its own master). SGD with momentum:
    4 + (4 when a fp32 master copy is needed). `pure` 16-bit: no master, each fp32 moment
    in the compute dtype instead (8-bit AdamW's 2 bytes stay)."""
    master = (dtype_bytes < 4) * 4 * (1 - pure)
    moments = {"adam": 8, "adamw": 8, "adamw-fused": 8, "adamw-8bit": 2, "sgd": 4}[optimizer]
    scaled = moments * dtype_bytes / 4 if optimizer != "adamw-8bit" else moments
    return master + moments + pure * (scaled - moments)


def params_bytes(psi, dtype_bytes, stage, dp):
    """Parameters on one device: partitioned over dp ranks at stage 3 only."""
    return psi * weight_bytes_per_param(dtype_bytes) / (1 + (stage >= 3) * (dp - 1))


def grads_bytes(psi, dtype_bytes, stage, dp):
    """Gradients on one device: partitioned from stage 2 on."""
    return psi * grad_bytes_per_param(dtype_bytes) / (1 + (stage >= 2) * (dp - 1))


def optimizer_bytes(psi, dtype_bytes, stage, dp, optimizer: str = "adamw", pure=0):
    """Optimizer states on one device: partitioned from stage 1 on."""
    return psi * optimizer_bytes_per_param(dtype_bytes, optimizer, pure) / (1 + (stage >= 1) * (dp - 1))


def model_state_bytes(psi, dtype_bytes, stage, dp, optimizer: str = "adamw", pure=0):
    """Total model states per device (the ZeRO paper's closed forms for mixed-precision Adam)."""
    return (params_bytes(psi, dtype_bytes, stage, dp) + grads_bytes(psi, dtype_bytes, stage, dp)
            + optimizer_bytes(psi, dtype_bytes, stage, dp, optimizer, pure))


def offloaded_device_bytes(psi, dtype_bytes, stage, dp, offload_level, optimizer: str = "adamw",
                           working_params=0, pure=0):
    """(params, grads, optimizer) bytes left on one device under offload.

    offload_level 0 none; 1 optimizer: the optimizer states go to the host and so do the
    gradients once reduced (ZeRO-Offload streams them out during backward, keeping only
    its buckets, neglected here); 2 params: the partitioned parameters go to the host too
    (ZeRO-Infinity), the device keeping `working_params` gathered parameters (the layers in
    use and the prefetched next ones).
    """
    p = params_bytes(psi, dtype_bytes, stage, dp)
    g = grads_bytes(psi, dtype_bytes, stage, dp)
    o = optimizer_bytes(psi, dtype_bytes, stage, dp, optimizer, pure)
    p = p * (offload_level < 2) + working_params * dtype_bytes * (offload_level >= 2)
    g = g * (offload_level < 1)
    o = o * (offload_level < 1)
    return p, g, o


def host_bytes_per_device(psi, dtype_bytes, stage, dp, offload_level, optimizer: str = "adamw", pure=0):
    """What one device's share puts in CPU memory under offload: optimizer states (12 Psi)
    plus the gradients in the compute dtype (2 Psi; ZeRO-Offload figure 2), plus the
    parameter partition with `params` offload."""
    o = psi * optimizer_bytes_per_param(dtype_bytes, optimizer, pure) / dp  # partitioned (stage >= 1)
    g = psi * dtype_bytes / dp
    p = params_bytes(psi, dtype_bytes, 3, dp)
    return (offload_level >= 1) * (o + g) + (offload_level >= 2) * p

