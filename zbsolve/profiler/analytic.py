"""Analytic activation memory of a GPT layer, to set beside what the profiler measures.

The Zero Bubble paper (after Korthikanti et al., "Reducing Activation Recomputation") counts, per
token and transformer layer, M_B = 34h + 5as bytes allocated by the forward and M_W = 32h bytes
kept until the weight gradient. Those numbers assume fp16/bf16 activations (2 bytes), 1-byte
dropout masks (attention probabilities, after the attention projection, after the MLP) and a
materialised s x s softmax. The breakdown, per token and layer, in *elements*:

- kept in the activation dtype: layer-norm inputs 2h; QKV input h; Q, K 2h; V h; softmax
  output a*s; its dropout output a*s; projection input h; fc1 input h; GELU input 4h; fc2 input
  4h -> 16h + 2as elements;
- dropout masks, 1 byte each: a*s + h + h.

With 2-byte elements that is 32h + 4as + 2h + as = 34h + 5as bytes. The W part is what the
weight gradients of the four linears need: their inputs (h + h + h + 4h = 7h) and their output
gradients (3h + h + 4h + h = 9h): 16h elements = 32h bytes in fp16.

The runner's model differs in three documented ways, and :func:`layer_bytes_per_token` scales
the formula accordingly: any element size (fp32 on CPU = 4 bytes), no dropout (masks and the
dropout output vanish: the softmax output feeds attention@V directly) and fused attention
(``scaled_dot_product_attention`` with a flash/memory-efficient kernel keeps only a
log-sum-exp per head and token, fp32, instead of the s x s probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerMemoryModel:
    """Which variant of the formula applies to a model."""

    dtype_bytes: int = 2  # bytes per activation element (fp16/bf16 = 2, fp32 = 4)
    dropout: bool = True  # dropout masks (1 byte) and the attention-dropout output are kept
    fused_attention: bool = False  # s x s probabilities not kept (flash / memory-efficient SDPA)

    @property
    def label(self) -> str:
        attn = "fused attention" if self.fused_attention else "materialised softmax"
        drop = "dropout" if self.dropout else "no dropout"
        return f"{self.dtype_bytes}-byte activations, {drop}, {attn}"


PAPER = LayerMemoryModel()
"""The setting of the 34h + 5as formula."""


def paper_m_b(h: int, a: int, s: int) -> float:
    """The paper's M_B in bytes per token and layer: 34h + 5as."""
    return 34.0 * h + 5.0 * a * s


def paper_m_w(h: int) -> float:
    """The paper's M_W in bytes per token and layer: 32h."""
    return 32.0 * h


def layer_bytes_per_token(
    h: int, a: int, s: int, model: LayerMemoryModel = PAPER
) -> tuple[float, float]:
    """(M_B, M_W) in bytes per token and layer for the given variant.

    Equals ``(paper_m_b, paper_m_w)`` for the paper's setting (checked by the tests).
    """
    e = model.dtype_bytes
    elements = 16.0 * h  # layer-norm, linear, GELU inputs; Q, K, V
    mask_bytes = 0.0
    if model.fused_attention:
        extra_bytes = 4.0 * a  # fp32 log-sum-exp per head and query token
    else:
        elements += a * s * (2 if model.dropout else 1)  # softmax output (+ its dropout output)
        extra_bytes = 0.0
    if model.dropout:
        mask_bytes = 2.0 * h + (0.0 if model.fused_attention else a * s)
    m_b = e * elements + mask_bytes + extra_bytes
    m_w = e * 16.0 * h
    return m_b, m_w


@dataclass(frozen=True)
class StageEstimate:
    """Analytic bytes of one logical stage for one microbatch."""

    activation: float  # allocated by F (M_B x layers x tokens, plus the stage's extras)
    weight: float  # kept from I's end to W's end
    layers: int
    extras: str  # what besides the transformer layers is counted


def stage_estimate(
    *, layers: int, h: int, a: int, s: int, b: int, vocab: int, first: bool, last: bool,
    model: LayerMemoryModel,
) -> StageEstimate:
    """Bytes per microbatch of a stage of ``layers`` blocks (+ embedding/head if first/last).

    Extras beyond the per-layer formula (not in the paper, which counts layers only):
    - first stage: the token ids (int64) the embedding keeps for its weight gradient, and the
      embedding gradient (h elements per token) that W needs;
    - last stage: the final norm input h, the head input h and the logits' log-softmax (vocab
      elements per token, in the activation dtype) for the cross-entropy; W of the LM head keeps
      its input h and its output gradient (vocab elements).
    """
    tokens = b * s
    m_b, m_w = layer_bytes_per_token(h, a, s, model)
    act = layers * m_b * tokens
    wgt = layers * m_w * tokens
    e = model.dtype_bytes
    extras = []
    if first:
        act += 8.0 * tokens
        wgt += e * h * tokens
        extras.append("token ids (int64) + embedding output gradient for W")
    if last:
        act += e * (2 * h + vocab) * tokens
        wgt += e * (h + vocab) * tokens
        extras.append("final norm + LM head inputs, log-softmax (vocab) for the loss")
    return StageEstimate(act, wgt, layers, "; ".join(extras) or "none")
