"""FLOPs and fewest bytes of each operator of a Llama decoder layer (docs/metrics.md "Operators").

The one table of operator costs: `bench ops` (micro/ops_cases.py, micro/ops_quant.py) puts
its measured rows against it, and perfmodel predicts with it (flops.py per token,
layertime.py per layer), so the efficiencies a calibration measures apply to the same
counts they were measured with. Pure arithmetic, no torch; scalars or numpy arrays.

- A multiply-add is 2 FLOPs. `e` is bytes per element of the compute dtype.
- `bytes` is the fewest bytes that must move: each input read once, each output written once
  (caches and re-reads not counted), so bytes_per_s is a lower bound on the traffic.
- Linear layers: X [T, k], W [n, k] (out x in, as nn.Linear), Y [T, n]. Forward 2Tkn;
  backward 4Tkn (dX = dY W and dW = dY^T X).
- Attention: b sequences of s tokens, a query heads and g key/value heads of width d; each
  product (QK^T, PV) is 2d FLOPs per (query, key) pair per head. A causal kernel scores the
  s(s+1)/2 unmasked pairs; eager attention (and PaLM's model FLOPs) the full s^2. `bench ops`
  counts the unmasked pairs for every backend alike, so their rates compare. Backward is
  four products (dV, dP, dQ, dK), twice the forward.
- Element-wise FLOPs are nominal (they are memory-bound), per element: RMSNorm 4, RoPE 3,
  SiLU x gate 5, softmax 5, cross-entropy 4 per logit, residual add 1; a backward counts
  twice its forward.
- The loss runs on fp32 logits (transformers upcasts them). AdamW over fp32 parameters:
  13 FLOPs and 7 x 4 bytes per parameter per step (optimizer_step_bytes_per_param).
- Quantized weights: the bytes their library stores (perfmodel.weights, tested against real
  bitsandbytes and torchao storage).
"""
from __future__ import annotations

from dataclasses import dataclass

from llmdissect.perfmodel import states
from llmdissect.perfmodel import weights as wt

# The operators one Llama decoder layer runs per pass, in the order it runs them, as this
# table names them: what a fixed cost per operator (dispatch, launch) is counted over.
LAYER_FORWARD_OPS = ("rmsnorm", "q_proj", "k_proj", "v_proj", "rope", "attention", "o_proj", "residual_add",
                     "rmsnorm", "gate_proj", "up_proj", "swiglu", "down_proj", "residual_add")
# Operators (top-level aten calls, each one dispatch, one kernel launch on a GPU) one decoder
# layer's forward runs in transformers 5.x, counted by torch.profiler on each family's layer
# (tests/integration/test_layer_op_counts.py recounts them): (dense layer, MoE layer). The
# table's 14 operators above stand for Llama's 53; another family's layer pays its fixed
# cost in proportion. Qwen2's biases ride in its projections' own calls; Qwen3 adds q/k
# norms; a MoE layer its router, top-k, dispatch and grouped expert calls (transformers'
# default grouped_mm: the same count for any tokens); latent attention its down/up
# projections, their norms and the split of rope dimensions.
LAYER_ATEN_OPS = {"llama": (53, 0), "mistral": (53, 0), "qwen2": (53, 0), "qwen3": (69, 0),
                  "mixtral": (0, 84), "qwen3_moe": (0, 100), "olmoe": (0, 98), "deepseek_v3": (87, 141),
                  "gpt_oss": (0, 108)}
LLAMA_LAYER_ATEN_OPS = 53
# Outside the layers: the embedding lookup before them; the final norm and the head after.
MODEL_EDGE_OPS = ("embedding", "rmsnorm", "lm_head")
LOSS_OPS = ("cross_entropy",)


def layer_forward_ops(m) -> float:
    """Operators of the table's kind one decoder layer of `m` runs per forward, the mean over
    its dense and MoE layers: len(LAYER_FORWARD_OPS) scaled by its family's aten count over
    Llama's (LAYER_ATEN_OPS). A family not counted there (Gemma 3) is taken as Llama."""
    dense, moe = LAYER_ATEN_OPS.get(m.model_type, (LLAMA_LAYER_ATEN_OPS, LLAMA_LAYER_ATEN_OPS))
    dense = dense or LLAMA_LAYER_ATEN_OPS
    moe = moe or dense
    mean = (m.dense_layers * dense + m.moe_layers * moe) / m.num_layers
    return len(LAYER_FORWARD_OPS) * mean / LLAMA_LAYER_ATEN_OPS


RMSNORM_FLOPS = 4  # square, mean, rsqrt-scale, weight-scale
ROPE_FLOPS = 3  # x cos + rotate_half(x) sin
SWIGLU_FLOPS = 5  # sigmoid, multiply, multiply (silu(gate) * up)
GELU_FLOPS = 8  # tanh form 0.5 x (1 + tanh(0.7979 (x + 0.044715 x^3))): arXiv 1606.08415
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide
CROSS_ENTROPY_FLOPS = 4  # log-softmax and NLL, per logit
ADAMW_FLOPS_PER_PARAM = 13  # m: 3, v: 4, bias-corrected update: 5, decoupled weight decay: 1


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte (the roofline's x axis)."""
        return self.flops / self.bytes


def _bwd(passes: str) -> bool:
    if passes not in ("fwd", "bwd"):
        raise ValueError(f"pass must be fwd or bwd, got {passes!r}")
    return passes == "bwd"


def _times(passes: str) -> int:
    """A backward does twice its forward's FLOPs."""
    return 2 if _bwd(passes) else 1


# ---- linear layers -------------------------------------------------------------------

def linear_flops(T, k, n, passes: str = "fwd"):
    """Y = X W^T: 2Tkn forward; backward dX = dY W and dW = dY^T X, 4Tkn."""
    return _times(passes) * 2 * T * k * n


LOSSES = ("unchunked", "chunked", "fused")
"""How the loss meets the logits (`--loss`): transformers' ForCausalLMLoss over the whole fp32
logits; torchtune's CEWithChunkedOutputLoss (the head and the loss run chunk by chunk); a fused
linear cross-entropy (Liger-Kernel's FusedLinearCrossEntropy, arXiv 2410.10989 sec. 3.2; Cut
Cross-Entropy, arXiv 2411.09009), which never keeps the logits."""
LOSS_CHUNKS = 8
"""torchtune's CEWithChunkedOutputLoss(num_output_chunks=8), the default of its recipes."""

HEADS = ("parallel", "gathered", "replicated")
"""How the output head and loss run under tensor parallelism (`--head`): parallel, the logits
and the cross-entropy sharded over the vocabulary (Megatron-LM's vocab-parallel
cross-entropy, arXiv 1909.08053 section 3; torchtitan's loss_parallel); gathered, the head's
product column-parallel and its logits all-gathered, the loss run whole on every rank (NeMo
AutoModel's MaskedCrossEntropy: `logits.float()`, then `full_tensor()`); replicated, every rank
runs the whole head and loss (bench's tensor-parallel plan, engines/tensor_parallel.py)."""


def head_shards(head, tp):
    """(the head's product's divisor, the loss's and the logits' divisor) under `tp` ranks."""
    products = tp + (head == 2) * (1 - tp)
    return products, tp + (head >= 1) * (1 - tp)


FLOAT8_RECIPES = ("none", "tensorwise")
"""Float8 training of the linear layers (`--float8`): torchao's Float8Linear with dynamic
tensor-wise scales, as torchtitan's float8 converter applies it."""


def float8_cast_bytes(inputs, weights, outputs, e, passes: str = "fwd"):
    """What torchao's Float8Linear (tensor-wise dynamic scaling; float8/float8_linear.py,
    matmul_with_hp_or_float8_args) moves to cast one linear's operands, given the elements of
    its input [T, k], weight [k, n] and output [T, n]. Each operand is cast from its
    high-precision copy: one pass for its amax, one that reads it and writes a byte an element,
    (2e + 1) bytes an element (as torch.compile fuses each cast; eager runs more passes).
    fwd: the input and the weight. bwd: the output gradient for dX, and its transposed copy for
    dW (the scale reused: e + 1); the weight and the input again, which the forward saved in
    high precision (`ctx.save_for_backward(input_hp, weight_hp_t)`)."""
    cast = 2 * e + 1
    if _bwd(passes):
        return cast * (outputs + weights + inputs) + (e + 1) * outputs
    return cast * (inputs + weights)


def linear_io_bytes(T, k, n, e, passes: str = "fwd"):
    """The activations' share of a linear layer's bytes. fwd: read X, write Y. bwd: read dY
    and X, write dX (the weight's share, read W and write dW, comes on top)."""
    if _bwd(passes):
        return e * (T * n + 2 * T * k)
    return e * (T * k + T * n)


def linear(T: int, k: int, n: int, e: float, passes: str = "fwd") -> Cost:
    """Y = X W^T. fwd: read X, W, write Y. bwd: read dY, W, X; write dX, dW."""
    weight = (2 if _bwd(passes) else 1) * e * k * n
    return Cost(linear_flops(T, k, n, passes), linear_io_bytes(T, k, n, e, passes) + weight)


LORA_DROPOUTS = ("none", "input", "output")
"""Where a LoRA adapter's dropout acts: nowhere, on its input X [T, k] (PEFT's lora.Linear:
`lora_B(lora_A(dropout(x)))`), or on its output [T, n] (NeMo AutoModel's LinearLoRA, whose
default dropout_position is "post")."""
DROPOUT_MASK_BYTES = 1  # the bool mask torch's native dropout keeps for backward


def lora_adapter(T, k, n, r, e, passes: str = "fwd", dropout=0) -> Cost:
    """The adapter path of one LoRA linear beside its frozen base, y = x W^T + s (x A^T) B^T
    (Hu et al., arXiv 2106.09685), run as separate operators, as PEFT's lora.Linear.forward
    and NeMo AutoModel's LinearLoRA.forward run it (nemo_automodel/components/_peft/lora.py).
    Its products have rank r, so the path moves the base's activations without their FLOPs:

    - fwd: X A^T reads X [T, k] and writes H [T, r]; the scale reads and writes H; H B^T reads
      it and writes the adapter's output [T, n]; the sum with the base's output reads both
      and writes Y.
    - bwd: the sum's gradient flows to both paths as is; dY is read twice (dB = dY^T H and
      dH = dY B), X once (dA = dH^T X); the adapter's share of dX is written [T, k] and
      summed with the base's dX (read both, write one).
    - `dropout` (index into LORA_DROPOUTS) 1 on the input, 2 on the output: each pass reads
      and writes that tensor and the 1-byte mask.

    FLOPs 2 T r (k + n) forward, twice that backward; bytes include A and B (and their
    gradients in backward)."""
    bwd = _bwd(passes)
    rank_io = e * T * r * (6 if bwd else 4)  # H and dH: fwd write, scale, read; bwd dB, dH, scale, dA, dX
    weights = (2 if bwd else 1) * e * r * (k + n)
    if bwd:
        io = 2 * e * T * n + e * T * k + e * T * k + 3 * e * T * k  # dY twice; X; dX's share; the sum
    else:
        io = e * T * k + e * T * n + 3 * e * T * n  # X; the adapter's output; the sum
    width = (dropout == 1) * k + (dropout == 2) * n
    drop = (2 * e + DROPOUT_MASK_BYTES) * T * width
    return Cost(_times(passes) * 2 * T * r * (k + n), io + rank_io + weights + drop)


def lora_expert_adapter(E, n, k, r, e, passes: str = "fwd") -> Cost:
    """LoRA on a stacked expert weight W [E, n, k] (every routed expert of a layer), as PEFT's
    ParamWrapper runs it (`target_parameters`, peft >= 0.17: lora/layer.py get_delta_weight
    and _activate_lora): each forward builds every expert's delta s B_e A_e (rank r) and adds
    it to the frozen weight before the experts run, whatever tokens reach them.

    - fwd: the einsum writes the delta [E, n, k] (2 E n k r FLOPs), the sum reads W and the
      delta and writes the merged weight: 4 E n k elements moved.
    - bwd: the merged weight's gradient [E, n, k] is read back through the sum and the einsum
      (dA, dB: 4 E n k r FLOPs), written and read once more: 3 E n k elements.

    A and B (r (n + k) per expert) are read, and in backward their gradients written."""
    bwd = _bwd(passes)
    weights = (2 if bwd else 1) * e * E * r * (n + k)
    return Cost(_times(passes) * 2 * E * n * k * r, e * E * n * k * (3 if bwd else 4) + weights)


# ---- attention -----------------------------------------------------------------------

def attention_pairs(s, causal=1):
    """(query, key) pairs one head scores in a sequence of s tokens: s(s+1)/2 unmasked ones
    when causal is 1, the full s^2 square when 0 (numeric, so it takes arrays)."""
    return s * s - causal * s * (s - 1) / 2


def attention_product_flops(pairs, a, d):
    """One product (QK^T or PV) over `pairs` (query, key) pairs in each of `a` heads:
    2d FLOPs (d multiply-adds) per pair per head."""
    return 2 * d * a * pairs


def attention_flops(b, s, a, d, passes: str = "fwd", causal=1):
    """QK^T and PV over the pairs of b sequences; backward (four products) twice that."""
    return _times(passes) * 2 * attention_product_flops(b * attention_pairs(s, causal), a, d)


def attention_io_bytes(b, s, a, g, d, e, passes: str = "fwd"):
    """fwd: read q [b,a,s,d], k, v [b,g,s,d]; write o [b,a,s,d]. bwd: read q, k, v, o, dO;
    write dq, dk, dv."""
    if _bwd(passes):
        return e * b * s * d * (4 * a + 4 * g)
    return e * b * s * d * (2 * a + 2 * g)


def eager_scores_bytes(b, s, a, e):
    """What eager attention adds to the fewest bytes: it writes and re-reads the b a s^2
    scores, 4 passes (matmul out, mask add, softmax in and out)."""
    return 4 * b * a * s * s * e


def attention(b: int, s: int, a: int, g: int, d: int, e: float, passes: str = "fwd") -> Cost:
    """Causal attention core over the unmasked pairs, for every backend alike."""
    return Cost(attention_flops(b, s, a, d, passes), attention_io_bytes(b, s, a, g, d, e, passes))


# ---- element-wise --------------------------------------------------------------------

def softmax(rows, cols, e, passes: str = "fwd") -> Cost:
    """Softmax over the last axis. fwd: read x, write y. bwd: read y, dy; write dx."""
    n = rows * cols
    return Cost(_times(passes) * SOFTMAX_FLOPS * n, (3 if _bwd(passes) else 2) * e * n)


def rmsnorm(T, h, e, passes: str = "fwd") -> Cost:
    """y = x / rms(x) * w. fwd: read x, w; write y. bwd: read x, w, dy; write dx, dw."""
    nbytes = e * (3 * T * h + 2 * h) if _bwd(passes) else e * (2 * T * h + h)
    return Cost(_times(passes) * RMSNORM_FLOPS * T * h, nbytes)


def rope(T, q_dim, kv_dim, d, e, passes: str = "fwd") -> Cost:
    """q, k <- x cos + rotate_half(x) sin. Reads q, k, cos [T,d], sin [T,d]; writes q, k
    (the same in backward, with dq, dk in place of q, k)."""
    n = T * (q_dim + kv_dim)
    return Cost(_times(passes) * ROPE_FLOPS * n, e * (2 * n + 2 * T * d))


def swiglu(T, f, e, passes: str = "fwd") -> Cost:
    """silu(gate) * up. fwd: read gate, up; write y. bwd: read gate, up, dy; write dgate, dup."""
    return Cost(_times(passes) * SWIGLU_FLOPS * T * f, (5 if _bwd(passes) else 3) * e * T * f)


def gelu(T, f, e, passes: str = "fwd") -> Cost:
    """GPT's MLP activation. fwd: read x, write y. bwd: read x, dy; write dx."""
    return Cost(_times(passes) * GELU_FLOPS * T * f, (3 if _bwd(passes) else 2) * e * T * f)


def mlp_activation(T, f, e, gated: bool, passes: str = "fwd") -> Cost:
    """The MLP's element-wise step: SwiGLU where gated, else GELU."""
    return swiglu(T, f, e, passes) if gated else gelu(T, f, e, passes)


KERNELS = ("eager", "fused")
"""How a layer's element-wise modules run (`--kernels`): eager, operator by operator as
transformers' and torchtitan's PyTorch modules are written (each aten operator a pass over
memory); fused, one pass a module (torch.compile's Inductor, Megatron / Transformer Engine's
fused kernels, serving engines' custom operators)."""


def rmsnorm_eager_bytes(T, h, e):
    """transformers' LlamaRMSNorm (torchtitan's RMSNorm is the same sequence), forward: x.to(fp32)
    (read e, write 4, a copy only when e < 4), pow(2) (read 4, write 4), mean (read 4), x * rsqrt
    (read 4, write 4), .to(e) (read 4, write e, where e < 4), weight * x (read e, write e); the
    per-row mean and rsqrt are T elements. 20 + 2e bytes an element, plus 8 + 2e for the casts."""
    return T * h * (20 + 2 * e + (e < 4) * (8 + 2 * e))


def rope_eager_bytes(T, q_dim, kv_dim, e):
    """transformers' apply_rotary_pos_emb on q and k, forward: x * cos (read e, write e; cos is
    [T, head_dim], broadcast over heads and served from cache), rotate_half's neg of one half
    and cat (read e, write e, over the halves), x' * sin (read e, write e), the sum (read 2e,
    write e): 10 e bytes an element of q and k, where one fused pass reads and writes 2 e."""
    return 10 * e * T * (q_dim + kv_dim)


def swiglu_eager_bytes(T, f, e):
    """act_fn(gate) * up as two operators: silu (read e, write e), then the product (read 2e,
    write e): 5 e bytes an element, where one fused pass moves 3 e."""
    return 5 * e * T * f


def moe_routing(T, k, h, E, e, passes: str = "fwd") -> Cost:
    """What a MoE layer moves besides its GEMMs (Lepikhin et al., arXiv 2006.16668, section
    2.2; transformers' experts): the router's fp32 softmax and top-k over T x E logits (read,
    write), the dispatch that gathers each token's hidden state once per chosen expert (read
    and write T k h), and the combine that scales each expert output by its routing weight
    and adds it into the token's row (read the output and the accumulator, write it: 3 T k h,
    plus the weighting's own read and write, 2 T k h). A backward moves each tensor again
    (the gather's gradient is the scatter-add and the other way round): twice the bytes."""
    nbytes = 2 * 4 * T * E + e * T * k * h * (2 + 3 + 2)
    flops = SOFTMAX_FLOPS * T * E + 2 * T * k * h  # routing weight and the add
    return Cost(_times(passes) * flops, _times(passes) * nbytes)


def residual_add(T, h, e) -> Cost:
    """x + y: read two [T, h], write one (not timed by `bench ops`; layertime counts two a layer)."""
    return Cost(T * h, 3 * e * T * h)


def embedding(T, V, h, e, passes: str = "fwd") -> Cost:
    """fwd: read T int64 ids and T rows of the table; write T rows. bwd: read ids and dY,
    write the dense table gradient [V, h] (one add per element of dY)."""
    if _bwd(passes):
        return Cost(T * h, 8 * T + e * T * h + e * V * h)
    return Cost(0, 8 * T + 2 * e * T * h)


def cross_entropy(T, V, passes: str = "fwd") -> Cost:
    """Mean NLL of log-softmax over fp32 logits [T, V]. fwd: read logits and int64 targets,
    write one scalar. bwd: read logits and targets, write dlogits."""
    if _bwd(passes):
        return Cost(2 * CROSS_ENTROPY_FLOPS * T * V, 4 * T * V + 8 * T + 4 * T * V)
    return Cost(CROSS_ENTROPY_FLOPS * T * V, 4 * T * V + 8 * T + 4)


# ---- optimizer -----------------------------------------------------------------------

def optimizer_step_bytes_per_param(dtype_bytes, optimizer: str = "adamw", pure=0):
    """Bytes one optimizer step moves per parameter: read the weight and its gradient and
    write the weight (3 x dtype), read and write every optimizer state (2 x
    states.optimizer_bytes_per_param). AdamW in fp32: read p, g, m, v, write p, m, v = 28;
    in pure bf16, 14."""
    return 3 * dtype_bytes + 2 * states.optimizer_bytes_per_param(dtype_bytes, optimizer, pure)


# torch.optim.AdamW without `fused` (torch/optim/adamw.py; the single-tensor loop on a CPU,
# where foreach is off, and the foreach form on a GPU run the same sequence): per element,
# mul_(p) 2, lerp_(m, g) 3, mul_(v) 2, addcmul_(v, g, g) 3, sqrt(v) 2, div 2, add_(eps) 2 and
# addcdiv_(p, m, denom) 4 reads and writes, each op a pass of its own over fp32 tensors (the
# parameters' own, or the fp32 master copy under mixed precision).
ADAMW_UNFUSED_PASSES = 20
# The single-tensor loop runs all eight ops on one tensor before the next: p, g, m, v and the
# two temporaries (sqrt, div) stay in a CPU's last-level cache when they fit, and then only
# the fewest bytes reach memory.
ADAMW_WORKING_TENSORS = 6


def optimizer_step_traffic_bytes_per_param(dtype_bytes, optimizer: str = "adamw", tensors=None, cache_bytes=0.0,
                                           shard=1, pure=0):
    """Bytes one optimizer step moves per parameter as its implementation runs it. torch's
    unfused AdamW/Adam makes ADAMW_UNFUSED_PASSES passes of 4 bytes (80, against the 28 a
    fused kernel needs), except over the tensors whose working set (ADAMW_WORKING_TENSORS
    x 4 bytes x elements / `shard`) fits in `cache_bytes`: those move the fewest bytes.
    `tensors` is layertime.model_param_tensors' list (None: all of them small, as LoRA's adapters).
    A fused kernel (`adamw-fused`, bitsandbytes' 8-bit AdamW) and SGD move the fewest bytes
    (optimizer_step_bytes_per_param). `pure` 16-bit: every pass over the compute dtype's
    tensors instead of fp32 ones. Scalars or numpy arrays (`shard`)."""
    fewest = optimizer_step_bytes_per_param(dtype_bytes, optimizer, pure)
    if optimizer not in UNFUSED_OPTIMIZERS:
        return fewest
    element = optimizer_element_bytes(dtype_bytes, pure)
    extra = ADAMW_UNFUSED_PASSES * element - fewest
    return fewest + extra * optimizer_spilled_fraction(tensors, cache_bytes, shard, element)


UNFUSED_OPTIMIZERS = ("adamw", "adam")
"""The optimizers torch runs as ADAMW_UNFUSED_PASSES passes (the rest: the fewest bytes)."""


def optimizer_element_bytes(dtype_bytes, pure=0):
    """The bytes of one element the optimizer's passes go over: fp32 master weights and states,
    or the compute dtype's under a `pure` 16-bit optimizer."""
    return 4 + pure * (dtype_bytes - 4)


def optimizer_spilled_fraction(tensors, cache_bytes, shard=1, element=4):
    """The share of the parameters whose tensor's working set (ADAMW_WORKING_TENSORS x
    `element` bytes x its elements / `shard`) does not fit in `cache_bytes`, so that every
    unfused pass goes to memory. `tensors`: layertime.model_param_tensors' (count, elements)
    list; None: all of them small (LoRA's adapters), spilled only where no cache is counted."""
    if tensors is None:
        return 1.0 * (cache_bytes <= 0)
    total = sum(c * n for c, n in tensors)
    return sum(c * n * (ADAMW_WORKING_TENSORS * element * n / shard > cache_bytes) for c, n in tensors) / total


# ---- a sharding engine's own copies ----------------------------------------------------

@dataclass(frozen=True)
class ShardingCopies:
    """Passes a sharding engine's own copies make over the parameters, beyond its collectives
    (each element read once and written once: 2 x its bytes), and the copy calls it makes per
    parameter tensor. Per micro-batch: `fwd_weights` and `bwd_weights` over the weights
    (unsharded size), `bwd_grads` over the gradients; per optimizer step: `opt_grads`."""

    fwd_weights: float = 0.0
    bwd_weights: float = 0.0
    bwd_grads: float = 0.0
    opt_grads: float = 0.0
    fwd_calls: float = 0.0
    bwd_calls: float = 0.0


def sharding_copies(fsdp, deepspeed, zero, dp, divides=1) -> ShardingCopies:
    """The copies around FSDP2's and DeepSpeed's collectives, from their sources (torch 2.13,
    DeepSpeed 0.18); `fsdp`, `deepspeed` 0/1, scalars or numpy arrays. With n = `dp` ranks:

    FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), per all-gather (forward;
    again in backward under ZeRO-3, which reshards after forward): `all_gather_copy_in`
    copies each parameter's shard into the flat input (1/n) and `foreach_all_gather_copy_out`
    copies the gathered output into each unsharded parameter (1); one call of each per
    tensor. Per reduce-scatter: `foreach_reduce_scatter_copy_in` (chunk-cat) copies every
    gradient into the flat input (1), and a backend without a native AVG (`divides` 1: gloo)
    divides that input by n first (1).

    DeepSpeed ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py): in backward each gradient
    is copied into the contiguous reduce bucket (1, one call per tensor), the bucket divided
    by n (`average_tensor`: 1) and the rank's partition copied out (1/n); at the step the
    partition's gradients are flattened (1/n), their norm read (all gradients: half a pass,
    read only), and the updated fp32 partition copied into the 16-bit buffer (1/n) before
    it is copied into the parameters (trainmodel's `flat` term). ZeRO-3 (stage3.py) gathers
    as FSDP2 does, and reduces as stage 2.

    One rank copies nothing."""
    n = dp + (dp < 1)
    many = (dp > 1) * 1
    gather = 1 / n + 1
    ds3 = deepspeed * (zero >= 3)
    fwd_w = many * (fsdp * (zero >= 2) + ds3) * gather
    bwd_w = many * (fsdp + deepspeed) * (zero >= 3) * gather
    bwd_g = many * (fsdp * (zero >= 2) * (1 + divides) + deepspeed * (2 + 1 / n))
    opt_g = many * deepspeed * (2 / n + 0.5)
    fwd_calls = many * (fsdp * (zero >= 2) + ds3) * 2
    bwd_calls = many * ((fsdp + deepspeed) * (zero >= 3) * 2 + deepspeed)
    return ShardingCopies(fwd_w, bwd_w, bwd_g, opt_g, fwd_calls, bwd_calls)


def adamw(params) -> Cost:
    """One AdamW step over `params` fp32 parameters (torch.optim.AdamW, as `bench ops` times it)."""
    return Cost(ADAMW_FLOPS_PER_PARAM * params, optimizer_step_bytes_per_param(4, "adamw") * params)


# ---- quantized weights ---------------------------------------------------------------

def quant_storage_bytes(k: int, n: int, e: float, quant: str, double_quant: bool = True) -> int:
    """Bytes of a quantized W [n, k] as stored (perfmodel.weights.linear_weight_bytes, `quant`
    one of its names: nf4, int8-bnb, int8-weight; `e` counts only for `none`)."""
    return wt.linear_weight_bytes(n, k, wt.check_quant(quant), e, double_quant)


def quantize(k: int, n: int, e: float, quant: str, double_quant: bool = True) -> Cost:
    """Read W in the compute dtype, write codes and scales (FLOPs not counted: memory-bound)."""
    return Cost(0, e * k * n + quant_storage_bytes(k, n, e, quant, double_quant))


def dequantize(k: int, n: int, e: float, quant: str, double_quant: bool = True) -> Cost:
    """Read codes and scales, write W in the compute dtype."""
    return Cost(0, quant_storage_bytes(k, n, e, quant, double_quant) + e * k * n)


def quant_linear(T: int, k: int, n: int, e: float, quant: str, double_quant: bool = True) -> Cost:
    """Y = X W^T with W stored quantized: 2Tkn FLOPs, reading the quantized weight."""
    return Cost(linear_flops(T, k, n), linear_io_bytes(T, k, n, e) + quant_storage_bytes(k, n, e, quant, double_quant))
