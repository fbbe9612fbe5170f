"""Bytes: what each layer keeps for its backward, what its parameters cost with Adam.

Activations (per microbatch) start from the Zero Bubble paper's per-token, per-layer count as
``zbsolve.profiler.analytic`` implements it (34h + 5as bytes allocated by F, 32h kept for W, for
Megatron's GPT block; its variants for other element sizes, no dropout and flash attention),
and add what a block has beyond that GPT block, in elements of the activation dtype:

- attention keeps Q, K, V: with grouped-query attention K and V are ``kv_dim`` wide instead of
  h (2 (kv_dim - h) elements);
- the MLP keeps its input, and per intermediate element the activation's input(s) and the down
  projection's input: GELU keeps h + 2 ffn (the GPT count, 9h at ffn = 4h), SwiGLU h + 3 ffn
  (gate, up, and their product); an MoE layer keeps the router input and its E logits and,
  per routed token copy (top_k x capacity_factor of them), the expert input and 3 expert_ffn;
- for W: the inputs and output gradients of every linear: 4h + 2 kv_dim for attention, and
  2h + 2 ffn (GELU), 2h + 3 ffn (SwiGLU), or the routed copies' 2h + 3 expert_ffn each plus the
  router's E for MoE. The GPT block's 16h elements are the case kv_dim = h, ffn = 4h, GELU.

Embedding and head layers take the stage extras of ``zbsolve.profiler.analytic.stage_estimate``
(token ids and the embedding's output gradient; final norm and head inputs and the log-softmax
over the vocabulary). As in the profiler, ``activation`` is raised to ``weight`` where W keeps
more than F saved (the embedding's output gradient), so the instance's memory model is an upper
bound of the real memory at every instant.

Static memory, mixed-precision Adam (Megatron's count without a distributed optimizer): per
parameter 2 bytes of bf16 weight + 4 bytes of fp32 gradient + 4 bytes of fp32 master weight +
4 + 4 bytes of Adam moments = 18 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from zbsolve.plan.shapes import ModelShape
from zbsolve.profiler.analytic import LayerMemoryModel, layer_bytes_per_token, stage_estimate

GPT_BLOCK_ELEMENTS = 16  # x h: what the GPT block keeps for F (besides attention probs) and W


@dataclass(frozen=True)
class AdamBytes:
    """Bytes per parameter held for the whole step by mixed-precision Adam."""

    weight: int = 2  # bf16 weights (what ``LayerCost.params`` counts)
    grad: int = 4  # fp32 gradient accumulation buffer
    master: int = 4  # fp32 master copy
    moments: int = 8  # Adam's m and v, fp32

    @property
    def per_param(self) -> int:
        return self.weight + self.grad + self.master + self.moments

    def static_bytes(self, param_bytes: float) -> float:
        """Weights + gradients + optimizer states of parameters whose bf16 weights take
        ``param_bytes``."""
        return param_bytes / self.weight * self.per_param


MIXED_ADAM = AdamBytes()


def memory_variant(shape: ModelShape) -> LayerMemoryModel:
    return LayerMemoryModel(dtype_bytes=shape.dtype_bytes, dropout=shape.dropout,
                            fused_attention=shape.attention == "flash")


def _kept_elements(shape: ModelShape) -> tuple[float, float]:
    """(F-kept, W-kept) elements per token of a block, without the attention probabilities."""
    h, kv = shape.hidden, shape.kv_dim
    # F: both norms' inputs, the QKV input, Q, K, V, the output projection's input
    # W: inputs of QKV and the output projection, their output gradients
    f_attn, w_attn = 5 * h + 2 * kv, 4 * h + 2 * kv
    moe = shape.moe
    if moe is not None:
        copies = moe.top_k * moe.capacity_factor
        f_mlp = h + moe.experts + copies * (h + 3 * moe.expert_ffn)
        w_mlp = h + moe.experts + copies * (2 * h + 3 * moe.expert_ffn)
        if moe.shared_ffn:
            f_mlp += 3 * moe.shared_ffn
            w_mlp += h + 3 * moe.shared_ffn
    elif shape.mlp == "gelu":
        f_mlp, w_mlp = h + 2 * shape.ffn, 2 * h + 2 * shape.ffn
    else:
        f_mlp, w_mlp = h + 3 * shape.ffn, 2 * h + 3 * shape.ffn
    return f_attn + f_mlp, w_attn + w_mlp


def block_bytes_per_token(shape: ModelShape) -> tuple[float, float]:
    """(M_B, M_W) in bytes per token of one decoder block (see the module docstring)."""
    m_b, m_w = layer_bytes_per_token(shape.hidden, shape.heads, shape.seq, memory_variant(shape))
    f_el, w_el = _kept_elements(shape)
    gpt = GPT_BLOCK_ELEMENTS * shape.hidden
    e = shape.dtype_bytes
    return m_b + e * (f_el - gpt), m_w + e * (w_el - gpt)


def _extras(shape: ModelShape, microbatch_size: int, *, first: bool, last: bool
            ) -> tuple[float, float]:
    est = stage_estimate(layers=0, h=shape.hidden, a=shape.heads, s=shape.seq,
                         b=microbatch_size, vocab=shape.vocab, first=first, last=last,
                         model=memory_variant(shape))
    return max(est.activation, est.weight), est.weight


def embedding_bytes(shape: ModelShape, microbatch_size: int) -> tuple[float, float]:
    """(activation, weight) bytes of the embedding layer for one microbatch."""
    return _extras(shape, microbatch_size, first=True, last=False)


def head_bytes(shape: ModelShape, microbatch_size: int) -> tuple[float, float]:
    """(activation, weight) bytes of the final norm + LM head + loss for one microbatch."""
    return _extras(shape, microbatch_size, first=False, last=True)


def block_params(shape: ModelShape) -> int:
    """Parameters of one decoder block."""
    h, kv = shape.hidden, shape.kv_dim
    attn = h * (h + 2 * kv) + h * h
    if shape.moe is not None:
        moe = shape.moe
        mlp = h * moe.experts + moe.experts * 3 * h * moe.expert_ffn + 3 * h * moe.shared_ffn
    else:
        mlp = (2 if shape.mlp == "gelu" else 3) * h * shape.ffn
    norms = (4 if shape.biases else 2) * h
    biases = (h + 2 * kv + h + shape.ffn + h) if shape.biases else 0
    return attn + mlp + norms + biases


def embedding_params(shape: ModelShape) -> int:
    return shape.vocab * shape.hidden


def head_params(shape: ModelShape) -> int:
    """Untied LM head plus the final norm (pipelines keep embedding and head apart)."""
    return shape.vocab * shape.hidden + (2 if shape.biases else 1) * shape.hidden
