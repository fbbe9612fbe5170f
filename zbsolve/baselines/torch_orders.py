"""PyTorch's own pipeline schedules as peers (``torch.distributed.pipelining``), where ours differ.

People run these orders as they come with torch, so the solver's "never worse than a hand-made
schedule" must cover them: each generator below emits, per rank, the compute order torch's
schedule class executes, restated from its documented behaviour (not its code) and pinned in
``tests/test_baselines_torch.py`` to torch's own ``pipeline_order`` (via its schedule
visualizer) when torch is installed. They ignore memory, as torch does; the solver reports them
against the limit like every other family.

- ``torch-interleaved-1f1b`` (``ScheduleInterleaved1F1B``, loop placement, v >= 2): microbatches
  go in rounds of ``per_round = m / max(1, m // p)`` (m must be a multiple of the number of
  rounds, torch's condition, looser than Megatron's m % p == 0 of ``1f1b-interleaved``); rank r
  warms up with (v-1)·per_round + 2(p-1-r) forwards (at most m·v), then alternates one forward
  and one full backward, then drains the backwards. The k-th forward of a rank runs chunk
  (k // per_round) mod v, the k-th backward chunk v-1 - (k // per_round) mod v, each on the next
  microbatch of that stage.
- ``torch-looped-bfs`` (``ScheduleLoopedBFS``, loop placement, v >= 2): every forward of chunk 0, then
  of chunk 1, ...; then the chunks in reverse, each running its full backwards from the last
  microbatch down to the first.
- ``torch-interleaved-zb`` (``ScheduleInterleavedZeroBubble``, loop placement, v >= 2): the
  interleaved order with one warm-up forward per hop instead of two, input backwards (I) in
  place of full ones, and, from its (r+1)-th backward on, rank r runs the W of its oldest
  pending I right after each I; the remaining W's close the step.
- ``torch-zbv`` (``ScheduleZBVZeroBubble``, V placement, v = 2): with n = max(2p-1, m) and rank
  r holding chunk 0 = stage r and chunk 1 = stage 2p-1-r: 2(p-r)-1 chunk-0 forwards; r pairs
  (F1, F0); p-r triples (F1, I1, W1); then, while chunk 1 lags chunk 0 or chunk 0 has forwards
  left: [F0 if any left], I0, W0, F1, I1, W1; then r pairs (I0, I1); p-r pairs (I0, W0);
  the chunk-1 W's; the chunk-0 W's. Ops of microbatches >= m (when m < 2p-1) are dropped.

``Schedule1F1B`` needs no generator: its runtime executes exactly our ``1f1b`` order (its
``pipeline_order`` numbers the last rank's forwards 1..m, but the runtime runs 0..m-1; the
tests pin ``1f1b`` to what the runtime runs), and ``ScheduleDualPipeV`` is our ``dualpipev``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from zbsolve.baselines.common import make, one_replica, renumbered_v, require, v_shape_stages
from zbsolve.instance import Instance, placement_for
from zbsolve.ops import Op
from zbsolve.schedule import Schedule


class _Counters:
    """Hands out microbatches in order per (kind, stage), as torch's schedules count them."""

    def __init__(self) -> None:
        self.next: dict[tuple[str, int], int] = {}

    def op(self, kind: str, stage: int) -> Op:
        key = (kind, stage)
        mb = self.next.get(key, 0)
        self.next[key] = mb + 1
        return Op(kind, stage, mb)


def _require_loop(inst: Instance, name: str, min_chunks: int) -> None:
    p, v = inst.devices, inst.chunks
    require(v >= min_chunks, name, f"needs chunks >= {min_chunks}, got {v}")
    one_replica(inst, name)
    require(inst.placement == placement_for("loop", p, v), name,
            f"needs the loop placement (stage s on device s % p), got {inst.placement_kind}; "
            "use placement: loop")


def _rounds(inst: Instance, name: str) -> int:
    """Microbatches per round (torch: rounds = max(1, m // p), m a multiple of rounds)."""
    p, m = inst.devices, inst.microbatches
    rounds = max(1, m // p)
    require(m % rounds == 0, name,
            f"needs microbatches divisible by the number of rounds max(1, m // p) = {rounds} "
            f"(m = {m}, p = {p})")
    return m // rounds


def _interleaved(inst: Instance, name: str, hops_factor: int, zero_bubble: bool) -> Schedule:
    p, m, v = inst.devices, inst.microbatches, inst.chunks
    per_round = _rounds(inst, name)
    total = m * v
    orders = []
    chunk_fwd = [(k // per_round) % v for k in range(total)]  # of a rank's k-th forward
    chunk_bwd = [v - 1 - c for c in chunk_fwd]  # of its k-th backward
    for r in range(p):
        warm = min((v - 1) * per_round + hops_factor * (p - 1 - r), total)
        count = _Counters()
        order: list[Op] = [count.op("F", chunk_fwd[k] * p + r) for k in range(warm)]
        pending_w: deque[Op] = deque()
        backward = "I" if zero_bubble else "B"
        for k in range(total):  # the k-th backward; forwards continue while any are left
            if warm + k < total:
                order.append(count.op("F", chunk_fwd[warm + k] * p + r))
            b = count.op(backward, chunk_bwd[k] * p + r)
            order.append(b)
            if zero_bubble:
                pending_w.append(b._replace(kind="W"))
                if k >= r:  # rank r runs its first r backwards without their W's
                    order.append(pending_w.popleft())
        order.extend(pending_w)
        orders.append(order)
    return make(inst, name, orders)


def torch_interleaved_1f1b(inst: Instance) -> Schedule:
    """torch's ScheduleInterleaved1F1B (module docstring)."""
    name = "torch-interleaved-1f1b"
    _require_loop(inst, name, 2)
    return _interleaved(inst, name, hops_factor=2, zero_bubble=False)


def torch_interleaved_zb(inst: Instance) -> Schedule:
    """torch's ScheduleInterleavedZeroBubble (module docstring)."""
    name = "torch-interleaved-zb"
    _require_loop(inst, name, 2)
    return _interleaved(inst, name, hops_factor=1, zero_bubble=True)


def torch_looped_bfs(inst: Instance) -> Schedule:
    """torch's ScheduleLoopedBFS (module docstring)."""
    name = "torch-looped-bfs"
    _require_loop(inst, name, 2)  # a PipelineScheduleMulti: at least two stages per rank
    p, m, v = inst.devices, inst.microbatches, inst.chunks
    orders = []
    for r in range(p):
        stages = [c * p + r for c in range(v)]
        order = [Op("F", s, j) for s in stages for j in range(m)]
        order += [Op("B", s, j) for s in reversed(stages) for j in reversed(range(m))]
        orders.append(order)
    return make(inst, name, orders)


def _zbv_rank(p: int, m: int, r: int, chunk0: int, chunk1: int) -> list[Op]:
    n = max(2 * p - 1, m)
    count = _Counters()
    order: list[Op] = []

    def run(*steps: tuple[str, int]) -> None:
        for kind, stage in steps:
            order.append(count.op(kind, stage))

    def done(kind: str, stage: int) -> int:
        return count.next.get((kind, stage), 0)

    for _ in range(2 * (p - r) - 1):
        run(("F", chunk0))
    for _ in range(r):
        run(("F", chunk1), ("F", chunk0))
    for _ in range(p - r):
        run(("F", chunk1), ("I", chunk1), ("W", chunk1))
    while done("F", chunk1) < done("F", chunk0) or done("F", chunk0) < n:
        if done("F", chunk0) < n:
            run(("F", chunk0))
        run(("I", chunk0), ("W", chunk0), ("F", chunk1), ("I", chunk1), ("W", chunk1))
    for _ in range(r):
        run(("I", chunk0), ("I", chunk1))
    for _ in range(p - r):
        run(("I", chunk0), ("W", chunk0))
    for stage in (chunk1, chunk0):
        while done("W", stage) < done("I", stage):
            run(("W", stage))
    return [op for op in order if op.mb < m]


@renumbered_v
def torch_zbv(inst: Instance) -> Schedule:
    """torch's ScheduleZBVZeroBubble (module docstring)."""
    name = "torch-zbv"
    pairs = v_shape_stages(inst, name)  # checks one replica, whole microbatches
    p, m = inst.devices, inst.microbatches
    return make(inst, name, [_zbv_rank(p, m, r, *pairs[r]) for r in range(p)])


GENERATORS: dict[str, Callable[[Instance], Schedule]] = {
    "torch-interleaved-1f1b": torch_interleaved_1f1b,
    "torch-looped-bfs": torch_looped_bfs,
    "torch-interleaved-zb": torch_interleaved_zb,
    "torch-zbv": torch_zbv,
}
