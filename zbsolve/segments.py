"""Sequence segments: what each of a microbatch's k pieces along the sequence costs.

Seq1F1B splits a microbatch into k segments along the sequence. With causal attention a
segment's forward needs the keys and values of the earlier segments only, so a stage can hand
segment g on before it has seen segment g+1, and a pipeline fills with pieces of microbatches.
The task graph (``zbsolve.graph``) has the dependencies; this module has the costs.

A segment of length l that ends at position P (it holds tokens P-l .. P-1) costs, per decoder
layer with hidden size h and MLP width f (matmul FLOPs per sequence of the batch):

- projections and MLP (Q, K, V, output projection, two MLP matmuls), forward:
  ``2 l (3h² + h² + 2hf) = l (8h² + 4hf)``; the input backward I runs the same matmuls once
  more for the input gradients, the weight backward W once more for the weight gradients;
- attention, forward: ``4 h · pairs`` (scores Q·Kᵀ and the weighted sum A·V, 2 h FLOPs per
  (query, key) pair each, summed over heads); I computes dQ, dK, dV and the score gradient,
  four matmuls of the same size: ``8 h · pairs``; W has no attention part (no weights);
- the LM head on the last stage: ``2 l h V`` in each of F, I and W.

``pairs`` is the number of (query, key) pairs the segment's attention computes: ``causal``
(what a kernel that skips masked blocks does, e.g. flash attention) counts each query at
position t with its t+1 keys, ``l (2P - l + 1) / 2``; ``dense`` (a masked dense kernel, such as
the runner's model on the CPU: every query of the segment against the whole prefix) counts
``l · P``. So attention grows with the prefix P, everything else with l: later segments of
equal length cost more. ``tests/test_segments_costs.py`` checks the ``dense`` count exactly
against ``torch.utils.flop_counter`` on the runner's segmented model.

Lengths: ``equal`` (as equal as integers allow, earlier segments take the extra token),
``balanced`` (boundaries chosen so that every segment's F + I + W over the whole model costs
the same: the first segment is the longest), or an explicit list.

An instance gives whole-microbatch times per stage, as without segments; a segment's time is
the stage's time times the segment's share of that kind's FLOPs on that stage (``prefix``), or
its share of the length (``length``, the default: no model shape needed). Memory is split by
length: a segment's activation (its keys and values included) is proportional to its tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

COST_MODELS = ("length", "prefix")
LENGTH_RULES = ("equal", "balanced")
ATTENTION = ("causal", "dense")
KINDS = ("F", "I", "W")


class SegmentError(ValueError):
    """Bad segment input; the message names the field and the fix."""


@dataclass(frozen=True)
class SegmentModel:
    """The model shape the ``prefix`` costs need (FLOP counts, not times).

    ``layers``: decoder layers per logical stage (one number for all, or one per stage);
    ``vocab``: the LM head's width on the last stage (0: no head counted).
    """

    seq: int
    hidden: int
    layers: tuple[int, ...]
    heads: int | None = None
    ffn: int | None = None  # MLP width; default 4 x hidden
    vocab: int = 0
    attention: str = "causal"

    @property
    def mlp(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    def to_dict(self) -> dict:
        layers: object = self.layers[0] if len(set(self.layers)) == 1 else list(self.layers)
        data = {"seq": self.seq, "hidden": self.hidden, "layers": layers}
        if self.heads is not None:
            data["heads"] = self.heads
        if self.ffn is not None:
            data["ffn"] = self.ffn
        if self.vocab:
            data["vocab"] = self.vocab
        if self.attention != "causal":
            data["attention"] = self.attention
        return data


# ---------------------------------------------------------------------- FLOPs
def pairs(start: int, end: int, attention: str = "causal") -> float:
    """(query, key) pairs of the segment holding tokens start .. end-1 (see module docstring)."""
    n = end - start
    if attention == "dense":
        return float(n * end)
    return n * (start + end + 1) / 2.0


def layer_flops(model: SegmentModel, start: int, end: int) -> dict[str, float]:
    """F, I and W FLOPs of one decoder layer for one sequence's segment start .. end-1."""
    h, n = model.hidden, end - start
    linear = n * (8.0 * h * h + 4.0 * h * model.mlp)
    attn = 4.0 * h * pairs(start, end, model.attention)
    return {"F": linear + attn, "I": linear + 2.0 * attn, "W": linear}


def stage_flops(model: SegmentModel, stage: int, start: int, end: int) -> dict[str, float]:
    """F, I and W FLOPs of one logical stage (its layers, plus the head on the last stage)."""
    per_layer = layer_flops(model, start, end)
    out = {k: model.layers[stage] * v for k, v in per_layer.items()}
    if stage == len(model.layers) - 1 and model.vocab:
        head = 2.0 * (end - start) * model.hidden * model.vocab
        out = {k: v + head for k, v in out.items()}
    return out


def bounds_of(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """[(start, end)] of consecutive segments of these lengths."""
    out, start = [], 0
    for n in lengths:
        out.append((start, start + n))
        start += n
    return out


# ---------------------------------------------------------------------- lengths
def equal_lengths(seq: int, k: int) -> list[int]:
    """k integer lengths summing to seq, as equal as possible (earlier ones take the extra)."""
    base, extra = divmod(seq, k)
    return [base + (1 if g < extra else 0) for g in range(k)]


def _model_cost(model: SegmentModel, start: int, end: int) -> float:
    """F + I + W FLOPs of the whole model (every stage) for one segment."""
    return sum(sum(stage_flops(model, s, start, end).values()) for s in range(len(model.layers)))


def balanced_lengths(model: SegmentModel, k: int) -> list[int]:
    """k integer lengths summing to ``model.seq`` whose whole-model costs are as equal as
    integers allow: each boundary is the token where the cumulative cost reaches g/k of the
    total (cumulative cost is additive over consecutive segments for ``causal`` attention;
    for ``dense`` each boundary is found against the cost of its own segment, by bisection on
    the common cost)."""
    seq = model.seq
    if k == 1:
        return [seq]
    if model.attention == "causal":
        total = _model_cost(model, 0, seq)
        cuts = [0]
        for g in range(1, k):
            target = total * g / k
            lo, hi = cuts[-1] + 1, seq - (k - g)
            while lo < hi:  # the first end whose prefix cost reaches the target
                mid = (lo + hi) // 2
                if _model_cost(model, 0, mid) < target:
                    lo = mid + 1
                else:
                    hi = mid
            below = _model_cost(model, 0, lo - 1) if lo - 1 > cuts[-1] else -math.inf
            cut = lo - 1 if target - below < _model_cost(model, 0, lo) - target else lo
            cuts.append(max(cut, cuts[-1] + 1))
        cuts.append(seq)
        return [b - a for a, b in zip(cuts, cuts[1:])]
    lo_t, hi_t = 0.0, _model_cost(model, 0, seq)
    best = equal_lengths(seq, k)
    for _ in range(100):
        target = (lo_t + hi_t) / 2
        lengths, start = [], 0
        for g in range(k - 1):
            lo, hi = start + 1, seq - (k - 1 - g)
            while lo < hi:  # the longest segment from start that costs at most the target
                mid = (lo + hi + 1) // 2
                if _model_cost(model, start, mid) <= target:
                    lo = mid
                else:
                    hi = mid - 1
            lengths.append(lo - start)
            start = lo
        last = _model_cost(model, start, seq)
        lengths.append(seq - start)
        if last > target:
            lo_t = target
        else:
            hi_t = target
            best = lengths
    return best


def resolve_lengths(rule: str | Sequence[int | float], k: int, model: SegmentModel | None,
                    where: str = "segment_lengths") -> tuple[float, ...]:
    """Segment lengths from a rule or an explicit list (tokens with a model, else relative)."""
    if isinstance(rule, str):
        if rule not in LENGTH_RULES:
            raise SegmentError(f"{where}: expected one of {', '.join(LENGTH_RULES)} or a list of "
                               f"{k} lengths, got {rule!r}")
        if rule == "balanced":
            if model is None:
                raise SegmentError(f"{where}: balanced needs the model shape to know what a "
                                   "segment costs: set segment_costs: prefix and segment_model")
            return tuple(float(x) for x in balanced_lengths(model, k))
        if model is None:
            return (1.0,) * k
        if model.seq < k:
            raise SegmentError(f"{where}: {k} segments need at least {k} tokens; "
                               f"segment_model.seq is {model.seq}")
        return tuple(float(x) for x in equal_lengths(model.seq, k))
    values = list(rule)
    if len(values) != k:
        raise SegmentError(f"{where}: expected {k} lengths (one per segment), got {len(values)}")
    for g, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
                or x <= 0:
            raise SegmentError(f"{where}[{g}]: expected a length > 0, got {x!r}")
    if model is not None:
        if any(int(x) != x for x in values) or sum(values) != model.seq:
            raise SegmentError(f"{where}: with segment_model the lengths are tokens: integers "
                               f"summing to segment_model.seq = {model.seq}, got {values}")
    return tuple(float(x) for x in values)


# ---------------------------------------------------------------------- shares
def length_shares(lengths: Sequence[float]) -> tuple[float, ...]:
    total = float(sum(lengths))
    return tuple(x / total for x in lengths)


def cost_shares(model: SegmentModel | None, lengths: Sequence[float], stage: int, kind: str
                ) -> tuple[float, ...]:
    """Each segment's share of one stage's ``kind`` time: by FLOPs with a model, else by length."""
    if model is None:
        return length_shares(lengths)
    flops = [stage_flops(model, stage, a, b)[kind] for a, b in bounds_of([int(x) for x in lengths])]
    total = sum(flops)
    return tuple(x / total for x in flops)


def split(total: float, shares: Sequence[float]) -> tuple[float, ...]:
    """``total`` split by ``shares`` (which sum to 1), rounded to 12 digits (no 0.1+0.2 noise),
    the last piece taking the remainder so the pieces sum to the total exactly as floats allow."""
    pieces = [round(total * x, 12) for x in shares[:-1]]
    pieces.append(round(total - sum(pieces), 12))
    return tuple(pieces)
