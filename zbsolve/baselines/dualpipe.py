"""DualPipe and DualPipeV: DeepSeek's bidirectional schedule and its V-shaped fold.

Both run one phase program per rank (eight phases whose lengths depend only on the rank, the
rank count and the microbatch count); they differ in what the program's two "chunks" are:

- **DualPipeV** (p ranks, one model of 2p stages, V placement): chunk 0 is stage r, chunk 1
  stage 2p-1-r; both chunks run every microbatch. For p = 4, m = 10 this emits exactly the
  order PyTorch's own DualPipeV test artifact lists (``zbsolve/data/reference/torch-artifacts``).
- **DualPipe** (p ranks, even p, two model replicas running in opposite directions): rank r's
  program is DualPipeV's for "half rank" h = min(r, p-1-r) on p/2 ranks and m/2 microbatches;
  on the first half of the ranks chunk 0 is the forward direction (replica 0's stage r) and
  chunk 1 the reverse direction (replica 1's copy on rank r), on the second half the other way
  round. Replica 0 runs the even microbatches, replica 1 the odd ones.

The main phases run "F&B": a forward of one chunk with a full backward of the other. Where the
instance allows that pair to overlap (``overlap: {FB: x}``) it is emitted as one overlapped job
(``ops.Pair``), lasting x (F + B); otherwise as the forward then the backward, which is how a
runtime without an overlap kernel runs it. The rank where the two directions meet (DualPipeV's
last rank, DualPipe's two middle ranks) runs its first main-phase pair unoverlapped, as
DeepSeek's and PyTorch's programs do. A "zero-bubble" backward is split into I now and W later:
its W joins a FIFO queue that the weight phases drain, so the order of W's is that of their I's.

Needs m >= 2 x ranks (DualPipe: m/2 >= p): with fewer microbatches rank 0's warm-up alone
would not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from zbsolve.baselines.common import make, renumbered_v, require, v_shape_stages
from zbsolve.instance import Instance
from zbsolve.ops import Entry, Op, Pair
from zbsolve.schedule import Schedule


class _Rank:
    """Builds one rank's order; each chunk hands out its microbatches in order."""

    def __init__(self, inst: Instance, stages: tuple[int, int],
                 mbs: tuple[Sequence[int], Sequence[int]]) -> None:
        self.inst = inst
        self.stages = stages
        self.mbs = mbs
        self.next_f = [0, 0]
        self.next_b = [0, 0]
        self.weights: list[Op] = []  # W's of split backwards, FIFO
        self.order: list[Entry] = []

    def _f(self, chunk: int) -> Op:
        op = Op("F", self.stages[chunk], self.mbs[chunk][self.next_f[chunk]])
        self.next_f[chunk] += 1
        return op

    def _b(self, chunk: int, split: bool) -> Op:
        s, mb = self.stages[chunk], self.mbs[chunk][self.next_b[chunk]]
        self.next_b[chunk] += 1
        if split:
            self.weights.append(Op("W", s, mb))
            return Op("I", s, mb)
        return Op("B", s, mb)

    def forward(self, chunk: int) -> None:
        self.order.append(self._f(chunk))

    def backward(self, chunk: int, split: bool = False) -> None:
        self.order.append(self._b(chunk, split))

    def forward_backward(self, f_chunk: int, overlap: bool = True) -> None:
        """F of one chunk with the full backward of the other: one job where allowed."""
        f, b = self._f(f_chunk), self._b(1 - f_chunk, split=False)
        if overlap and self.inst.overlap_factor(f.stage, b.stage) is not None:
            self.order.append(Pair(f, b))
        else:
            self.order += [f, b]

    def weight(self) -> None:
        self.order.append(self.weights.pop(0))


def phase_program(inst: Instance, r: int, p: int, m: int, stages: tuple[int, int],
                  mbs: tuple[Sequence[int], Sequence[int]]) -> list[Entry]:
    """Rank r's order among p ranks with m microbatches per chunk (DualPipeV's numbers)."""
    k = _Rank(inst, stages, mbs)
    turn = r == p - 1  # where the two directions meet
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
    # 4 (main): F0&B1 then F1&B0
    for i in range(m - 2 * p + r + 1):
        k.forward_backward(0, overlap=not (turn and i == 0))
        k.forward_backward(1)
    # 5: B1 then F1&B0
    for _ in range(p - r - 1):
        k.backward(1)
        k.forward_backward(1)
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


@renumbered_v
def dualpipev(inst: Instance) -> Schedule:
    """DualPipeV on p ranks (V placement, 2 chunks); F&B pairs overlapped where allowed."""
    require(inst.replicas == 1, "dualpipev", "needs one model replica (replicas: 1); the "
            "two-replica form is 'dualpipe'")
    pairs = v_shape_stages(inst, "dualpipev")
    p, m = inst.devices, inst.microbatches
    require(m >= 2 * p, "dualpipev",
            f"needs microbatches >= 2 x ranks = {2 * p}, got {m}; raise microbatches")
    every = range(m)
    orders = [phase_program(inst, r, p, m, pairs[r], (every, every)) for r in range(p)]
    return make(inst, "dualpipev", orders)


def dualpipe(inst: Instance) -> Schedule:
    """DualPipe on p ranks (even p), two replicas in opposite directions, one chunk each."""
    p, m = inst.devices, inst.microbatches
    require(inst.replicas == 2, "dualpipe", "needs two model replicas (replicas: 2)")
    require(inst.chunks == 1, "dualpipe", f"needs chunks = 1 per replica, got {inst.chunks}")
    require(p % 2 == 0 and p >= 2, "dualpipe", f"needs an even number of ranks, got {p}")
    S = inst.model_stages
    require(list(inst.placement[:S]) == list(range(p)), "dualpipe",
            "needs replica 0 on the loop placement (stage s on device s); use placement: loop")
    require(m >= 2 * p, "dualpipe",
            f"needs microbatches >= 2 x ranks = {2 * p}, got {m}; raise microbatches")
    half = p // 2
    orders = []
    for r in range(p):
        down, up = r, S + (p - 1 - r)  # replica 0's stage on rank r, replica 1's
        chunks = (down, up) if r < half else (up, down)
        mbs = tuple(list(inst.microbatches_of(s)) for s in chunks)
        orders.append(phase_program(inst, min(r, p - 1 - r), half, m // 2, chunks, mbs))
    return make(inst, "dualpipe", orders)
