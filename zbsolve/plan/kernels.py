"""The kernels one layer runs for one microbatch, with their FLOPs and bytes, by pass (F, I, W).

Every matmul ``Y = X A`` (X: t x k tokens, A: k x n weights) splits three ways, which is what
the zero-bubble schedules exploit:

- F: ``Y = X A``: 2tkn FLOPs; reads X and A, writes Y;
- I (input gradient, the papers' B): ``dX = dY A^T``: 2tkn FLOPs; reads dY and A, writes dX;
- W (weight gradient): ``dA = X^T dY``: 2tkn FLOPs; reads X and dY and accumulates dA into an
  fp32 gradient buffer (read and write, 8 bytes per weight: Megatron's ``main_grad``).

Attention's score and value products have no weights, so both of their backward products are
input gradients (I): a materialised attention (Megatron without flash) runs 4 s h FLOPs per token
forward and 8 s h backward; flash attention (causal) does half of that work forward and
2.5x the forward backward (FlashAttention-2 recomputes the scores), and never writes the
s x s probabilities. Everything else (norms, activations, dropout, residual adds, softmax,
cross-entropy, embedding gathers) is bandwidth-bound: counted in bytes read and written.

A kernel's time is the roofline ``max(flops / (eta * peak), bytes / (eta * bandwidth))``
(``Accelerator.kernel_seconds``); a pass's time is the sum over its kernels, as the kernels of
one microbatch run one after another on one stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from zbsolve.plan.shapes import ModelShape

PASSES = ("F", "I", "W")
GRAD_ACCUMULATE_BYTES = 8  # fp32 gradient buffer, read and written once per microbatch


@dataclass(frozen=True)
class Kernel:
    name: str
    pass_: str  # F | I | W
    flops: float
    bytes: float


def _matmul(name: str, t: float, k: int, n: int, e: int) -> list[Kernel]:
    """The three products of one linear layer (t tokens, k inputs, n outputs, e-byte elements)."""
    flops = 2.0 * t * k * n
    return [
        Kernel(f"{name}", "F", flops, e * (t * k + k * n + t * n)),
        Kernel(f"{name}.dX", "I", flops, e * (t * n + k * n + t * k)),
        Kernel(f"{name}.dW", "W", flops, e * (t * k + t * n) + GRAD_ACCUMULATE_BYTES * k * n),
    ]


def _elementwise(name: str, t: float, fwd: float, bwd: float, wgt: float = 0.0) -> list[Kernel]:
    """Bandwidth-bound work: bytes per token forward (F), backward (I) and for weights (W)."""
    out = [Kernel(name, "F", 0.0, t * fwd), Kernel(f"{name}.bwd", "I", 0.0, t * bwd)]
    if wgt:
        out.append(Kernel(f"{name}.dW", "W", 0.0, t * wgt))
    return out


def norm(name: str, t: float, h: int, e: int) -> list[Kernel]:
    """LayerNorm / RMSNorm: read x, write y; backward reads x and dy, writes dx; the scale's
    gradient (W) reduces x-hat times dy."""
    return _elementwise(name, t, 2 * e * h, 3 * e * h, 2 * e * h)


def residual(name: str, t: float, h: int, e: int, dropout: bool) -> list[Kernel]:
    """Residual add (Megatron fuses bias, dropout and the add); its gradient is added to the
    stream's gradient."""
    mask = h if dropout else 0  # 1-byte mask written forward, read backward
    return _elementwise(name, t, 3 * e * h + mask, 3 * e * h + mask)


def attention(shape: ModelShape, t: float) -> list[Kernel]:
    """Q K^T, softmax, (dropout), P V and the per-head layout copies; no weights."""
    h, a, s, e, kv = shape.hidden, shape.heads, shape.seq, shape.dtype_bytes, shape.kv_dim
    qkvo = e * t * (2 * h + 2 * kv)
    if shape.attention == "flash":
        flops = 2.0 * t * s * h  # 4tsh halved by the causal mask
        lse = 4.0 * t * a  # fp32 log-sum-exp per head and token
        return [Kernel("attention.flash", "F", flops, qkvo + lse),
                Kernel("attention.flash.bwd", "I", 2.5 * flops,
                       qkvo + e * t * h + lse + e * t * (h + 2 * kv))]
    probs = e * t * a * s  # one s x s matrix per head, per token: a*s elements
    mask = t * a * s if shape.dropout else 0.0
    drop_f = (2 * probs + mask) if shape.dropout else 0.0
    drop_b = (2 * probs + mask) if shape.dropout else 0.0
    return [
        Kernel("attention.scores", "F", 2.0 * t * s * h, e * t * (h + kv) + probs),
        Kernel("attention.softmax", "F", 0.0, 2 * probs + drop_f),
        Kernel("attention.context", "F", 2.0 * t * s * h, probs + e * t * (kv + h)),
        Kernel("attention.context.bwd", "I", 4.0 * t * s * h, 2 * probs + e * t * (2 * h + 2 * kv)),
        Kernel("attention.softmax.bwd", "I", 0.0, 3 * probs + drop_b),
        Kernel("attention.scores.bwd", "I", 4.0 * t * s * h, 2 * probs + e * t * (2 * h + 2 * kv)),
        Kernel("attention.merge_heads", "F", 0.0, 2 * e * t * h),
        Kernel("attention.merge_heads.bwd", "I", 0.0, 2 * e * t * h),
    ]


def mlp(shape: ModelShape, t: float, ffn: int, prefix: str = "mlp") -> list[Kernel]:
    """A dense MLP on t tokens: GELU (fc1, fc2) or SwiGLU (gate and up as one product, down)."""
    h, e = shape.hidden, shape.dtype_bytes
    if shape.mlp == "gelu":
        return [*_matmul(f"{prefix}.fc1", t, h, ffn, e),
                *_elementwise(f"{prefix}.gelu", t, 2 * e * ffn, 3 * e * ffn),
                *_matmul(f"{prefix}.fc2", t, ffn, h, e)]
    return [*_matmul(f"{prefix}.gate_up", t, h, 2 * ffn, e),
            *_elementwise(f"{prefix}.silu_mul", t, 3 * e * ffn, 5 * e * ffn),
            *_matmul(f"{prefix}.down", t, ffn, h, e)]


def moe_mlp(shape: ModelShape, t: float) -> list[Kernel]:
    """Router, dispatch, the routed experts as one grouped product, combine, shared experts.

    The experts see ``t * top_k * capacity_factor`` token rows in all, and every expert's
    weights are read once per microbatch (which is what makes small microbatches slow for MoE).
    """
    moe = shape.moe
    assert moe is not None
    h, e, E = shape.hidden, shape.dtype_bytes, moe.experts
    rows = t * moe.top_k * moe.capacity_factor
    f = moe.expert_ffn
    out = [*_matmul("moe.router", t, h, E, e),
           *_elementwise("moe.topk", t, 3 * 4 * E, 3 * 4 * E),
           *_elementwise("moe.dispatch", t, e * h * (1 + moe.top_k), e * h * (1 + moe.top_k)),
           *_elementwise("moe.combine", t, e * h * (1 + moe.top_k), e * h * (1 + moe.top_k))]
    for name, k, n in (("moe.experts.gate_up", h, 2 * f), ("moe.experts.down", f, h)):
        flops = 2.0 * rows * k * n
        weights = E * k * n
        out += [Kernel(name, "F", flops, e * (rows * (k + n) + weights)),
                Kernel(f"{name}.dX", "I", flops, e * (rows * (k + n) + weights)),
                Kernel(f"{name}.dW", "W", flops,
                       e * rows * (k + n) + GRAD_ACCUMULATE_BYTES * weights)]
    out += _elementwise("moe.experts.silu_mul", rows, 3 * e * f, 5 * e * f)
    if moe.shared_ffn:
        out += mlp(shape, t, moe.shared_ffn, prefix="moe.shared")
    return out


def decoder_block(shape: ModelShape, t: float) -> list[Kernel]:
    """One transformer block (pre-norm): norm, QKV, attention, output projection, residual,
    norm, MLP (dense or MoE), residual."""
    h, e, kv = shape.hidden, shape.dtype_bytes, shape.kv_dim
    out = [*norm("attn_norm", t, h, e), *_matmul("qkv", t, h, h + 2 * kv, e),
           *attention(shape, t), *_matmul("attn_out", t, h, h, e),
           *residual("attn_residual", t, h, e, shape.dropout), *norm("mlp_norm", t, h, e)]
    if shape.rotary:
        out += _elementwise("rope", t, 2 * e * (h + kv), 2 * e * (h + kv))
    out += moe_mlp(shape, t) if shape.moe is not None else mlp(shape, t, shape.ffn)
    out += residual("mlp_residual", t, h, e, shape.dropout)
    if shape.biases:  # bias gradients: one reduction over the tokens of each output
        out.append(Kernel("bias.dW", "W", 0.0, e * t * (h + 2 * kv + h + shape.ffn + h)))
    return out


def embedding(shape: ModelShape, t: float) -> list[Kernel]:
    """Token embedding: a gather forward; no input gradient (the input is token ids); the weight
    gradient is torch's dense one: the V x h gradient written, and accumulated in fp32."""
    h, e, V = shape.hidden, shape.dtype_bytes, shape.vocab
    return [Kernel("embedding.gather", "F", 0.0, 8 * t + 2 * e * t * h),
            Kernel("embedding.dW", "W", 0.0, e * t * h + (e + GRAD_ACCUMULATE_BYTES) * V * h)]


def head(shape: ModelShape, t: float) -> list[Kernel]:
    """Final norm, the LM head (h x V) and the cross-entropy over the vocabulary."""
    h, e, V = shape.hidden, shape.dtype_bytes, shape.vocab
    return [*norm("final_norm", t, h, e), *_matmul("lm_head", t, h, V, e),
            *_elementwise("cross_entropy", t, 2 * e * V + 8, 2 * e * V + 8)]


def pass_flops(kernels: list[Kernel]) -> dict[str, float]:
    return {p: sum(k.flops for k in kernels if k.pass_ == p) for p in PASSES}
