"""Seq1F1B and its Zero Bubble form: 1F1B over (microbatch, segment) units.

Seq1F1B (Sun et al., "Seq1F1B: Efficient Sequence-Level Pipeline Parallelism for Large Language
Model Training", 2024) cuts every microbatch into k segments along the sequence. With causal
attention a segment's forward needs only the keys and values of the earlier segments of its
microbatch, so the first stage hands segment 0 on before it has read segment 1, and the
pipeline fills with pieces of microbatches. The units run in the order

- forwards: (0, 0), (0, 1), ..., (0, k-1), (1, 0), ... (microbatch-major, segments in order);
- backwards: (0, k-1), (0, k-2), ..., (0, 0), (1, k-1), ... (a microbatch's segments newest
  first: segment g's backward adds the gradients of the keys and values that segments after it
  read, so it waits for theirs, ``zbsolve.graph``).

Stage r of p warms up with ``p - r + k - 2`` forward units (1F1B's p - r - 1, plus the k - 1
segments the last stage must run before the first backward of a microbatch can start, since
segment 0 is the last of its microbatch to go back), then alternates one forward and one
backward, then drains. With k = 1 the order is exactly 1F1B's. In flight on stage 0: p + k - 1
segment units, (p + k - 1) / k microbatches instead of 1F1B's p.

``seq1f1b-zb`` splits each backward into I then W as ZB-H1 does: the steady state runs
(F, I, W-delayed) triples, and stage r holds back r weight backwards, which fill the drain, where
stage r finishes its last I r hand-offs before stage 0 does; with k = 1 it is exactly ZB-H1.

Bubble (checked by the tests): with equal segment costs (F, I, W the same for every segment
of every stage) and no comm, seq1f1b's makespan is (k m + p - 1)(F + I + W) per unit, so its
bubble is exactly (p - 1) / (k m + p - 1): the warm-up's extra k - 1 units are paid for by the
drain, not added to it. Prefix costs (later segments dearer, ``zbsolve.segments``) and comm
make it longer; ``segment_lengths: balanced`` evens the units out again.

Applicability: one chunk per device (v = 1), one replica, any p, m, k.
"""

from __future__ import annotations

from zbsolve.baselines.common import make, require, single_chunk_stages
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule


def forward_units(m: int, k: int) -> list[tuple[int, int]]:
    """(microbatch, segment) in the order every stage runs their forwards."""
    return [(j, g) for j in range(m) for g in range(k)]


def backward_units(m: int, k: int) -> list[tuple[int, int]]:
    """(microbatch, segment) in the order every stage runs their backwards (newest first)."""
    return [(j, g) for j in range(m) for g in reversed(range(k))]


def warmup(p: int, stage: int, k: int) -> int:
    """Forward units stage ``stage`` of ``p`` runs before its first backward."""
    return p - stage + k - 2


def stage_order(stage: int, p: int, m: int, k: int, *, split: bool, w_delay: int = 0
                ) -> list[Op]:
    """One stage's order: warm-up forwards, steady (F, backward[, W delayed]) and the drain.

    ``split``: backwards as I then W (W held back ``w_delay`` units), else fused B. Pure and
    stage-local, as ``zero_bubble.split_backward_order`` is for whole microbatches.
    """
    fwd, bwd = forward_units(m, k), backward_units(m, k)
    warm = min(warmup(p, stage, k), len(fwd))
    order = [Op("F", stage, j, g) for j, g in fwd[:warm]]
    next_f, next_w = warm, 0
    for i, (j, g) in enumerate(bwd):
        if next_f < len(fwd):
            order.append(Op("F", stage, *fwd[next_f]))
            next_f += 1
        if not split:
            order.append(Op("B", stage, j, g))
            continue
        order.append(Op("I", stage, j, g))
        if i - w_delay >= 0:
            order.append(Op("W", stage, *bwd[next_w]))
            next_w += 1
    order.extend(Op("W", stage, *u) for u in bwd[next_w:] if split)
    return order


def _build(inst: Instance, name: str, split: bool) -> Schedule:
    stages = single_chunk_stages(inst, name)
    require(inst.segments > 1, name, "needs sequence segments (segments > 1); with one segment "
            f"it is {'zb-h1' if split else '1f1b'} exactly")
    p, m, k = inst.stages, inst.microbatches, inst.segments
    orders = [stage_order(s, p, m, k, split=split, w_delay=s if split else 0) for s in stages]
    sched = make(inst, name, orders)
    sched.meta.update(warmup=[min(warmup(p, s, k), m * k) for s in stages],
                      w_delay=[s if split else 0 for s in stages], segments=k)
    return sched


def seq1f1b(inst: Instance) -> Schedule:
    """Seq1F1B: 1F1B over segment units, fused backwards (in flight: p + k - 1 units)."""
    return _build(inst, "seq1f1b", split=False)


def seq1f1b_zb(inst: Instance) -> Schedule:
    """Seq1F1B with the I/W split of ZB-H1: stage r holds back r weight backwards."""
    return _build(inst, "seq1f1b-zb", split=True)
