"""DualPipeV: DeepSeek's DualPipe folded into a V on p ranks (2p stages, one parameter copy).

Rank r holds chunk 0 = stage r and chunk 1 = stage 2p-1-r (the V placement). Each rank runs
eight phases whose lengths depend only on r, p and m; this generator follows that phase
structure, so for p = 4, m = 10 it emits exactly the order PyTorch's own DualPipeV test
artifact lists (``shared/reference/torch-artifacts/dualpipev_4rank_10mb.csv``).

The runtime overlaps a forward of one chunk with a full backward of the other ("F&B"); here
such a pair is two sequential ops on the same device, forward first, which is how the torch
artifact spells it too (``(0F7;7B3)OVERLAP_F_B`` = run 0F7, then 7B3). A "zero-bubble"
backward is split into I now and W later: its W joins a FIFO queue that the weight-pass
phases drain, so the order of W's is the order their I's ran.

Needs m >= 2p (the main phase of rank 0 has m - 2p + 1 >= 1 steps): with fewer microbatches
the warm-up of rank 0 alone would not fit.
"""

from __future__ import annotations

from zbsolve.baselines.common import make, require, v_shape_stages
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule


class _Rank:
    """Builds one rank's order; counters hand out microbatches in order per chunk."""

    def __init__(self, stages: tuple[int, int]) -> None:
        self.stages = stages
        self.next_f = [0, 0]
        self.next_b = [0, 0]
        self.weights: list[Op] = []  # W's of split backwards, FIFO
        self.order: list[Op] = []

    def forward(self, chunk: int) -> None:
        self.order.append(Op("F", self.stages[chunk], self.next_f[chunk]))
        self.next_f[chunk] += 1

    def backward(self, chunk: int, split: bool = False) -> None:
        s, mb = self.stages[chunk], self.next_b[chunk]
        self.next_b[chunk] += 1
        if split:
            self.order.append(Op("I", s, mb))
            self.weights.append(Op("W", s, mb))
        else:
            self.order.append(Op("B", s, mb))

    def weight(self) -> None:
        self.order.append(self.weights.pop(0))


def _rank_order(r: int, p: int, m: int, stages: tuple[int, int]) -> list[Op]:
    k = _Rank(stages)
    # 1: chunk-0 forwards that fill the time until chunk 1's input first arrives
    for _ in range(2 * (p - r - 1)):
        k.forward(0)
    # 2: forward pairs
    for _ in range(r + 1):
        k.forward(0)
        k.forward(1)
    # 3: chunk-1 backward (split), its weight pass, next chunk-1 forward
    for _ in range(p - r - 1):
        k.backward(1, split=True)
        k.weight()
        k.forward(1)
    # 4 (main): F0&B1 then F1&B0, each pair modelled as the forward then the full backward
    for _ in range(m - 2 * p + r + 1):
        k.forward(0)
        k.backward(1)
        k.forward(1)
        k.backward(0)
    # 5: B1 then F1&B0
    for _ in range(p - r - 1):
        k.backward(1)
        k.forward(1)
        k.backward(0)
    # 6: B1, B0; from the middle step on the backwards are split (W's wait in the queue)
    steps = r + 1
    split = False
    for i in range(steps):
        if i == steps // 2 and r % 2 == 1:
            split = True
        k.backward(1, split=split)
        if i == steps // 2 and r % 2 == 0:
            split = True
        k.backward(0, split=split)
    # 7: a queued weight pass, then a split chunk-0 backward
    for _ in range(p - r - 1):
        k.weight()
        k.backward(0, split=True)
    # 8: drain the weight passes
    while k.weights:
        k.weight()
    return k.order


def dualpipev(inst: Instance) -> Schedule:
    """DualPipeV on p ranks (V placement, 2 chunks), F&B overlap as sequential F then B."""
    pairs = v_shape_stages(inst, "dualpipev")
    p, m = inst.devices, inst.microbatches
    require(m >= 2 * p, "dualpipev",
            f"needs microbatches >= 2 x ranks = {2 * p}, got {m}; raise microbatches")
    orders = [_rank_order(r, p, m, pairs[r]) for r in range(p)]
    return make(inst, "dualpipev", orders)
