"""Every assumption of the model that is not a formula, in one place, each overridable.

Efficiencies are fractions of a peak that an operator class reaches in practice. They are
read, in increasing priority, from `DEFAULT_EFFICIENCY` below, the hardware TOML's
`[efficiency]` table, and the calibration profile's `efficiency` section (what `bench ops`
measured on the machine). The values below are typical of well-tuned kernels on data-center
GPUs: large GEMMs reach 60-80 % of the dense peak (NVIDIA's cuBLAS notes; Megatron-LM reports
~50 % MFU end to end, arXiv 2104.04473), fused attention 40-60 % (FlashAttention-2, arXiv
2307.08691), element-wise kernels 70-90 % of the memory bandwidth (STREAM-like copies).
"""
from __future__ import annotations

# Operator classes used by the roofline (perfmodel.roofline): each operator belongs to one.
OP_CLASSES = ("gemm", "attention", "memory", "weights", "comm", "host_link")

DEFAULT_EFFICIENCY: dict[str, float] = {
    "gemm": 0.70,        # fraction of the dense matmul peak reached by large GEMMs
    "attention": 0.50,   # fused attention kernels (sdpa / flash); eager attention is gemm + memory
    "memory": 0.80,      # fraction of the memory bandwidth reached by element-wise kernels
    # fraction of the memory bandwidth a GEMM reaches streaming its weights (decode's skinny
    # products): on an H200, a 1 x 8192 x 8192 bf16 product read its 128 MiB at 3.29 TB/s,
    # 0.685 of the 4.8 TB/s datasheet (this project's gpu_check, docs/gpu.md, 2026-12-04;
    # the copy kernel reached 0.89). A CPU's measured GEMM grid holds its own.
    "weights": 0.685,
    "comm": 0.80,        # fraction of the link bandwidth reached by large ring collectives
    "host_link": 0.80,   # fraction of the PCIe bandwidth reached by offload copies
}

# What differs by GPU architecture, where a source measured it (a hardware TOML's
# `[efficiency]` or a calibration profile wins over these):
# - gemm: the best bf16 matmul PyTorch reaches, as a fraction of the datasheet's dense peak
#   (MAMF, "Maximum Achievable Matmul FLOPS", a brute-force search over shapes; S. Bekman,
#   ml-engineering, compute/accelerator/README.md, BF16 table: A100 SXM 271.2 of 312 = 86.9 %,
#   H100 SXM 794.5 of 989 = 80.3 % ("H200 is the same"), B200 SXM 1745 of 2250 = 77.6 %).
#   DEFAULT_EFFICIENCY's gemm is the Ampere figure (the published set's A100 points hold it
#   within 7 %); another architecture's is it times that architecture's MAMF over the A100's.
# - attention: the flash kernels PyTorch frameworks run (SDPA's flash backend, transformers'
#   flash_attention_2) are FlashAttention-2's, written for Ampere: "FlashAttention-2 achieving
#   only 35% utilization on the H100 GPU" (FlashAttention-3, arXiv 2407.08608, abstract), where
#   it reaches 50-73 % on an A100 (arXiv 2307.08691). FlashAttention-3 and cuDNN's fused
#   attention reach up to 75 % on Hopper: a user who runs them says so in a hardware TOML.
GEMM_MAMF_FRACTION: dict[str, float] = {"ampere": 0.869, "hopper": 0.803, "blackwell": 0.776}
GEMM_REFERENCE_ARCHITECTURE = "ampere"
ATTENTION_EFFICIENCY_BY_ARCHITECTURE: dict[str, float] = {"hopper": 0.35}
# FlashAttention-3 (`--attn flash3`, Hopper only): "reaching up to 740 TFLOPs/s (75%
# utilization)" in BF16 on an H100 (Shah et al., arXiv 2407.08608, abstract). Its forward's
# figure, taken for the backward too; a measured attention curve (bench ops runs SDPA's
# FlashAttention-2) does not apply to it.
FLASH3_ATTENTION_EFFICIENCY = 0.75
FLASH3_ARCHITECTURES = ("hopper",)


def efficiency_for(architecture: str | None, mamf_fraction: float = 0.0) -> dict[str, float]:
    """DEFAULT_EFFICIENCY with what differs on a GPU of `architecture` (see above); a part's own
    measured MAMF fraction (`mamf_fraction`, the hardware TOML's gemm_mamf_fraction: GeForce parts
    run above their datasheet's boost clock) wins over its architecture's."""
    arch = (architecture or "").lower()
    eff = dict(DEFAULT_EFFICIENCY)
    fraction = mamf_fraction or GEMM_MAMF_FRACTION.get(arch)
    if fraction is not None:
        eff["gemm"] = DEFAULT_EFFICIENCY["gemm"] * fraction / GEMM_MAMF_FRACTION[GEMM_REFERENCE_ARCHITECTURE]
    eff["attention"] = ATTENTION_EFFICIENCY_BY_ARCHITECTURE.get(arch, eff["attention"])
    return eff


# Latency of a collective: a fixed cost per call plus a small cost per ring step, in
# seconds, per link kind: (base_s, per_step_s). GPU links take NCCL's own tuning model
# (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel: latency = baseLat + nsteps x hwLat;
# ring/LL, the protocol NCCL picks for small messages: baseLat 3.6 us, hwLat NVLink 0.47 us,
# PCI 1.0 us, network 2.7 us), so a small all-reduce over 8 GPUs costs ~10 us, not
# 2 (n - 1) x a per-hop alpha. NVSwitch systems are NVLink to NCCL. The CPU's gloo has no
# published model: its default is a typical TCP loopback round trip (~50 us per call),
# and `bench comm` fits replace it on the machine that ran them.
DEFAULT_COLLECTIVE_LATENCY_S: dict[str, tuple[float, float]] = {
    "nvlink": (3.6e-6, 0.47e-6), "nvswitch": (3.6e-6, 0.47e-6), "pcie": (3.6e-6, 1.0e-6),
    "net": (3.6e-6, 2.7e-6), "cpu": (50e-6, 0.0), "default": (3.6e-6, 1.0e-6)}

# Fixed cost of one operator on a GPU, where `peak` has not measured it: a kernel launch
# issued right after the previous one, 3.8 us per kernel in NVIDIA's measurement of short
# back-to-back kernels (A. Gray, "Getting Started with CUDA Graphs", NVIDIA Technical Blog,
# 2019: 3.8 us per kernel without a sync between launches). What a forward pays outside its
# layers takes the same cost per operator of op_costs.MODEL_EDGE_OPS; `generate`'s own
# per-step cost has no published figure and is 0 until measured (the estimate says so).
OP_FIXED_S_GPU = 3.8e-6

# Fraction of data-parallel / ZeRO communication hidden behind backward compute. DeepSpeed
# and PyTorch DDP overlap bucketed gradient reduction with backward; Megatron's TP
# all-reduces sit on the critical path (0 overlap).
DEFAULT_OVERLAP_FRACTION = 0.5
# On a CPU nothing hides: gloo moves the bytes with the same cores the compute runs on (each
# of N processes holds cores / N threads), and PyTorch's CPU backends have no side streams.
CPU_OVERLAP_FRACTION = 0.0

# The framework's allowance on a GPU: CUDA context and kernels (~0.5-1 GiB on recent
# drivers) plus allocator fragmentation, taken as a fraction of what the tensors need.
FRAMEWORK_CONTEXT_BYTES_GPU = 1 * 2**30
FRAGMENTATION_FRACTION_GPU = 0.05

# ZeRO-Offload's CPU Adam: DeepSpeed reports ~1e9 parameter updates per second on a
# many-core server (arXiv 2101.06840, Table 3: 1.0-1.5 B params/s for 1 B-10 B models).
CPU_ADAM_PARAMS_PER_S = 1.0e9

# Bytes of optimizer state per parameter (beyond the parameter itself).
#   adamw/adam under mixed precision: fp32 master copy + m + v = 12 (ZeRO paper's K = 12)
#   adamw/adam in fp32: m + v = 8;  sgd with momentum: (master 4 +) momentum 4;
#   adamw-8bit (bitsandbytes, arXiv 2110.02861): m and v in 8 bits, 2 (+ master 4).
OPTIMIZERS = ("adamw", "adamw-fused", "adamw-8bit", "adam", "sgd")

# Inference: tokens of context a decode step sees on average is input + output / 2.


def assumptions_for(kind: str) -> dict[str, float]:
    """The named, overridable assumptions for a device kind (gpu | cpu). A calibration
    profile's `perfmodel` section overrides any of them (calibrate.machine_for)."""
    gpu = kind == "gpu"
    return {"framework_context_bytes": float(FRAMEWORK_CONTEXT_BYTES_GPU if gpu else 0),
            "fragmentation_fraction": FRAGMENTATION_FRACTION_GPU if gpu else 0.0,
            "overlap_fraction": DEFAULT_OVERLAP_FRACTION if gpu else CPU_OVERLAP_FRACTION,
            "cpu_adam_params_per_s": CPU_ADAM_PARAMS_PER_S}
