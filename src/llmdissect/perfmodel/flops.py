"""FLOPs of a Llama-family decoder, per operator and in total.

Conventions (docs/metrics.md): a multiply-add is 2 FLOPs; forward FLOPs per token of a
linear layer with n weights are 2n, its backward 4n (activation gradient 2n + weight
gradient 2n). "Model FLOPs" follow PaLM (arXiv 2204.02311, appendix B): 6N + 12 L d_attn s,
with the full (non-causal) score matrix, so MFU compares with published figures. Non-matmul
operators (RMSNorm, RoPE, SwiGLU, softmax, loss) are counted only for the roofline, which
finds them memory-bound anyway. Each per-operator count is op_costs' (the table `bench ops`
measures against) for one token.

Every function takes scalars or numpy arrays (plain arithmetic, no branches on values).
"""
from __future__ import annotations

from llmdissect.perfmodel import op_costs as opc
from llmdissect.perfmodel.layertime import op_policy_gemms
from llmdissect.specs.models import ModelSpec

# ---- forward FLOPs per token, per layer ------------------------------------------------

def qkv_flops_fwd(m: ModelSpec):
    """Q, K, V projections, grouped-query aware: 2 h (q_dim + 2 kv_dim)."""
    return opc.linear_flops(1, m.hidden_size, m.q_dim + 2 * m.kv_dim)


def out_proj_flops_fwd(m: ModelSpec):
    """Attention output projection: 2 q_dim h."""
    return opc.linear_flops(1, m.q_dim, m.hidden_size)


def scores_flops_fwd(m: ModelSpec, seq):
    """Q K^T for one query token against `seq` keys, every head: 2 s d_attn (PaLM counts the
    full square; a causal kernel does about half): one token's `seq` pairs."""
    return opc.attention_product_flops(seq, m.num_heads, m.head_dim)


def attn_v_flops_fwd(m: ModelSpec, seq):
    """Attention weights times V: 2 s d_attn per token, as Q K^T (MLA: values of v_head_dim)."""
    return opc.attention_product_flops(seq, m.num_heads, m.v_head_dim if m.is_mla else m.head_dim)


def softmax_flops_fwd(m: ModelSpec, seq):
    """Max, subtract, exp, sum, divide over `seq` scores per head: ~5 a s."""
    return opc.SOFTMAX_FLOPS * m.num_heads * seq


def rope_flops_fwd(m: ModelSpec):
    """RoPE on q and k: x cos + rotate_half(x) sin is 3 FLOPs per element."""
    return opc.ROPE_FLOPS * (m.q_dim + m.kv_dim)


def mlp_flops_fwd(m: ModelSpec):
    """SwiGLU MLP matmuls: gate and up (4 h f) and down (2 f h); GPT's: up (2 h f) and down.
    A MoE layer's f is the width of the token's k experts and the shared ones (moe.py)."""
    h, f = m.hidden_size, m.mlp_token_width
    return opc.linear_flops(1, h, m.mlp_in_matrices * f) + opc.linear_flops(1, f, h)


def swiglu_flops_fwd(m: ModelSpec):
    """silu(gate) * up: sigmoid, multiply, multiply, ~5 FLOPs per element of f (GPT: GELU's)."""
    return (opc.SWIGLU_FLOPS if m.gated_mlp else opc.GELU_FLOPS) * m.mlp_token_width


def rmsnorm_flops_fwd(m: ModelSpec):
    """Square, mean, rsqrt-scale, weight-scale: ~4 FLOPs per element; two norms per layer."""
    return 2 * opc.RMSNORM_FLOPS * m.hidden_size


def layer_matmul_flops_fwd(m: ModelSpec):
    """2 x (matmul weights one token uses in a layer): the 2N share of one layer, averaged
    over the layers (MLA's projections, the router, top-k and shared experts, DeepSeek's
    dense first layers; for a dense Llama exactly qkv + out + mlp)."""
    return 2 * (m.params_matmul - m.params_head) / m.num_layers


def layer_attention_flops_fwd(m: ModelSpec, seq):
    """Scores and attention x V of one layer: 4 s d_attn (full square)."""
    return scores_flops_fwd(m, seq) + attn_v_flops_fwd(m, seq)


def head_flops_fwd(m: ModelSpec):
    """Output head: 2 h V."""
    return opc.linear_flops(1, m.hidden_size, m.vocab_size)


def loss_flops_fwd(m: ModelSpec):
    """Log-softmax and NLL over the vocabulary: ~4 V per token."""
    return opc.CROSS_ENTROPY_FLOPS * m.vocab_size


def forward_flops_per_token(m: ModelSpec, seq):
    """All forward FLOPs of one token (matmuls, attention, and the small operators)."""
    per_layer = (layer_matmul_flops_fwd(m) + layer_attention_flops_fwd(m, seq) + softmax_flops_fwd(m, seq)
                 + rope_flops_fwd(m) + swiglu_flops_fwd(m) + rmsnorm_flops_fwd(m))
    return m.num_layers * per_layer + head_flops_fwd(m) + loss_flops_fwd(m)


# ---- totals under METRICS.md's conventions -------------------------------------------

def model_flops_per_token(m: ModelSpec, seq, lora_params=0):
    """PaLM model FLOPs per token of training: 6 N + 12 L d_attn s.

    N = `params_matmul` (every linear layer with the head, not the embedding or norms).
    With LoRA/QLoRA (`lora_params` > 0) the frozen base costs 4 N (forward 2N, activation
    gradients 2N, no weight gradients) and the adapters 6 N_lora (docs/metrics.md).
    """
    attention = 3 * m.num_layers * layer_attention_flops_fwd(m, seq)  # 12 L d_attn s: fwd 1x + bwd 2x
    frozen = (lora_params > 0) * 1
    return (6 - 2 * frozen) * m.params_matmul + 6 * lora_params + attention


def recompute_flops_per_token(m: ModelSpec, seq, level):
    """Extra forward FLOPs per token that activation recomputation repeats.

    level 0 none; 1 selective (Korthikanti et al., arXiv 2205.05198: only the attention core,
    4 L d_attn s); 2 full (the whole forward again but the head: 2 N_layers + 4 L d_attn s);
    3 op (torchtitan's per-operator policy: the GEMMs it does not save, layertime.op_policy_gemms;
    the fused attention's outputs are saved).
    """
    attention = m.num_layers * layer_attention_flops_fwd(m, seq)  # 4 L d_attn s
    layers = m.num_layers * layer_matmul_flops_fwd(m)
    redone = m.num_layers * sum(opc.linear_flops(1, k, n) for k, n, _ in op_policy_gemms(m)[1])
    return (level == 1) * attention + (level == 2) * (attention + layers) + (level == 3) * redone


def hardware_flops_per_token(m: ModelSpec, seq, level, lora_params=0):
    """Model FLOPs plus the recomputed forward (docs/metrics.md `hfu`): with full
    recomputation 8 N + 16 L d_attn s (minus the head's extra forward, which is not redone)."""
    return model_flops_per_token(m, seq, lora_params) + recompute_flops_per_token(m, seq, level)


def inference_flops_per_token(m: ModelSpec, context):
    """Forward FLOPs of one generated token attending to `context` tokens: 2 N + 4 L d_attn c."""
    return 2 * m.params_matmul + m.num_layers * layer_attention_flops_fwd(m, context)
