"""Stretch a schedule of fewer microbatches to the instance's m (issue 18: warm-up, steady state,
cool-down).

Why: with many microbatches on devices that hold several stages, the exact model and the window
search find the warm-up and the cool-down but lose their way in the long steady state between
them (vmin/p8-m32: 207 after 120 s against a bound of 203; vmin/p8-m64: 409 against 395). A good
schedule of a reduced instance, the same model with m' < m microbatches, already holds a steady
state: repeating it gives a schedule of the full instance (from the proven 83 of p8-m12, 203 for
p8-m32 and 395 for p8-m64: both the bound, so both optimal).

How. Per device, a *block* is a run of its order that holds exactly n ops of every (kind, stage)
the device runs. Where the order keeps microbatch order per (kind, stage) (the exact model's
symmetry breaking does, bounds.py) the block's ops of a class are the last n of that class
before the block's end, microbatches c-n .. c-1. Copying the block ``delta / n`` times with its
microbatches shifted by n each time, then the rest of the order shifted by ``delta``, lists every
op of the m-microbatch instance exactly once and in microbatch order again (an order out of
microbatch order gives a list the simulator refuses). The devices are aligned by the microbatch
``cut``: each device takes its block nearest to the forward of its first stage for that
microbatch, so every device repeats the same microbatches' round. Two variants: the orders as
they are, and the orders without their W's, which a list schedule then puts back in the gaps
that do not delay anything (``refill_weight_grads``): a W waits on nothing but its own I, and on
the reduced instance the solver placed the W's for m', not for m.

Nothing here judges a schedule: every candidate goes through the simulator with the memory
limit (``validate``) before it joins the solve's pool, and an order that deadlocks is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, load_instance
from zbsolve.ops import Kind, Op
from zbsolve.schedule import Schedule
from zbsolve.solver.bounds import in_flight_caps

MAX_BLOCK = 4  # microbatches per block tried: 1 .. MAX_BLOCK
MAX_REDUCED_OPS = 800  # the reduced instance's size: what the exact method proves in a minute
MIN_OPS = 300  # the instance's size below which the exact method needs no help
STRETCH_FACTOR = 2.5  # m >= this x m': the copies make up most of the model


def reduced_sizes(inst: Instance) -> list[int]:
    """The microbatch counts m' of the reduced instances to stretch from, smallest first;
    empty where stretching does not apply.

    m' = ceil(1.5 p) and 2p: enough microbatches for the pipeline to fill and leave a steady
    state between warm-up and cool-down (a V's first device sees a microbatch again only after
    its 2p stages). The smaller is proven sooner (V-Min p8-m12: 83 in 27 s; p8-m16: 107 in
    about 47 s), the larger has a steady state where the smaller has none. Only m' above the
    microbatches a device can hold in flight (``in_flight``): with fewer, all may be in flight
    at once and there is no steady state. Only m >= ``STRETCH_FACTOR`` m', so that the copies
    make up most of the model: on the random family (m = 20, m' = 9) the phase only delayed
    proofs (random-15: 28.7 s without, 36.3 s with; random-tight-05: 17.8 s, 24.7 s), on the
    V-Min rows (m >= 2.7 m') it proved them. Only where the reduced instance has at most
    ``MAX_REDUCED_OPS`` ops: a stretch is only as good as the reduced schedule (each copied
    block adds its work and no idle), and larger reduced instances are not solved well in a
    share of the limit (p = 16: the 32-microbatch V-Min rows end at about the hand-made
    value). Only where the instance has more than ``MIN_OPS``: below, the exact model proves on
    its own in seconds (random-28, 144 ops: 7.6 s without the phase, 23.5 s with it). Only on
    plain instances whose devices hold several stages: one-stage devices are proven without
    it, and replicas, segments, overlapped pairs, memory modes and the step's jobs give ops
    that are not one per (kind, stage, microbatch).
    """
    if not (inst.plain and inst.several_stages_per_device):
        return []
    ops = TaskGraph(inst).count()
    if ops <= MIN_OPS:
        return []
    per_microbatch = ops / inst.microbatches
    cap = in_flight(inst)
    p = inst.devices
    return [k for k in sorted({math.ceil(1.5 * p), 2 * p})
            if cap < k and STRETCH_FACTOR * k <= inst.microbatches
            and per_microbatch * k <= MAX_REDUCED_OPS]


def in_flight(inst: Instance) -> float:
    """The most microbatches a device's first stage may hold at once under its memory limit
    (``bounds.in_flight_caps``; infinite without a limit). A reduced instance with no more
    microbatches than that can keep them all in flight: its schedule is warm-up and cool-down
    with no steady state to repeat (V-Half p = 4, 6 in flight: no block at m' = 6, the proven
    194 of p4-m32 from m' = 8; the DualPipeV row p4-m16, 9 in flight: no block at m' = 6, and
    the 14 s of its reduced solve cost the proof that came at 47.6 s without the phase)."""
    worst = 0.0
    for d in range(inst.devices):
        first = min(inst.stages_of(d))
        worst = max(worst, in_flight_caps(inst, d).get(first, math.inf))
    return worst


def reduced(inst: Instance, microbatches: int) -> Instance:
    """The same instance with fewer microbatches (loaded again, so it is checked again)."""
    data = inst.to_dict()
    data["microbatches"] = microbatches
    data["name"] = f"{inst.name}-m{microbatches}"
    return load_instance(data)


def blocks(order: list[Op], n: int) -> Iterator[tuple[int, int]]:
    """(start, end) of every run of ``order`` holding exactly n ops of each (kind, stage) it
    runs: the blocks a stretch may copy (module docstring)."""
    counts = {(op.kind, op.stage): 0 for op in order}
    size = n * len(counts)
    for i, op in enumerate(order):  # a sliding window of ``size`` ops
        counts[(op.kind, op.stage)] += 1
        if i >= size:
            old = order[i - size]
            counts[(old.kind, old.stage)] -= 1
        if i >= size - 1 and all(c == n for c in counts.values()):
            yield i - size + 1, i + 1


def repeat_block(order: list[Op], start: int, end: int, delta: int, n: int) -> list[Op]:
    """``order`` with its block [start, end) copied ``delta / n`` times, each copy's
    microbatches n above the last, and the rest of the order shifted by ``delta``."""
    block = order[start:end]
    out = list(order[:end])
    for k in range(1, delta // n + 1):
        out += [op._replace(mb=op.mb + k * n) for op in block]
    return out + [op._replace(mb=op.mb + delta) for op in order[end:]]


def stretch_order(order: list[Op], delta: int, cut: int, n: int) -> list[Op] | None:
    """One device's order with ``delta`` more microbatches: the block of n ops of every class
    nearest to the first stage's forward of microbatch ``cut`` repeated (module docstring), or
    None where the order has no such block."""
    first = min(op.stage for op in order)
    anchor = next((i for i, op in enumerate(order)
                   if op.kind == Kind.F and op.stage == first and op.mb == cut), None)
    if anchor is None or delta % n:
        return None
    best: tuple[int, int, int] | None = None  # (distance to the anchor, block start, end)
    for start, end in blocks(order, n):
        dist = 0 if start <= anchor < end else min(abs(anchor - start), abs(anchor - end + 1))
        if best is None or dist < best[0]:
            best = (dist, start, end)
    return None if best is None else repeat_block(order, best[1], best[2], delta, n)


def refill_weight_grads(inst: Instance, skeletons: list[list[Op]]) -> list[list[Op]] | None:
    """Orders from W-less ones: a list schedule that runs each device's ops in their order as
    early as they can start and puts a W (whose I has run on the device) into every gap before
    the next op that it fits without delaying it; the W's left over go last. None on deadlock.

    Memory is not looked at: a W held back keeps its part of the activation, so the caller's
    ``validate`` decides."""
    graph = TaskGraph(inst)
    p = len(skeletons)
    end: dict[Op, float] = {}
    free = [0.0] * p
    nxt = [0] * p
    waiting: list[list[Op]] = [[] for _ in range(p)]
    orders: list[list[Op]] = [[] for _ in range(p)]

    def ready(op: Op) -> float | None:
        t = 0.0
        for q, delay in graph.preds(op):
            if q not in end:
                return None
            t = max(t, end[q] + delay)
        return t

    def run(d: int, op: Op, at: float) -> None:
        end[op] = at + graph.duration(op)
        free[d] = end[op]
        orders[d].append(op)

    while True:
        pick: tuple[float, int, float] | None = None  # (start, device, ready)
        for d in range(p):
            if nxt[d] < len(skeletons[d]):
                r = ready(skeletons[d][nxt[d]])
                if r is not None and (pick is None or max(r, free[d]) < pick[0]):
                    pick = (max(r, free[d]), d, r)
        if pick is None:
            break
        _, d, r = pick
        while waiting[d] and free[d] + graph.duration(waiting[d][0]) <= r + 1e-9:
            run(d, waiting[d].pop(0), free[d])
        op = skeletons[d][nxt[d]]
        run(d, op, max(r, free[d]))
        nxt[d] += 1
        if op.kind == Kind.I:
            waiting[d].append(Op(Kind.W, op.stage, op.mb, op.seg))
    if any(nxt[d] < len(skeletons[d]) for d in range(p)):
        return None
    for d in range(p):
        orders[d] += waiting[d]
    return orders


def stretched(inst: Instance, small: Schedule,
              stop: Callable[[], bool] = lambda: False) -> Iterator[Schedule]:
    """Candidate schedules of ``inst`` from ``small``, a schedule of the same model with fewer
    microbatches: every block size, cut microbatch and variant (module docstring), without
    repeats. ``stop`` is asked between candidates (the caller's clock)."""
    m_small = 1 + max(op.mb for op in small.ops())
    delta = inst.microbatches - m_small
    if delta <= 0 or small.has_pairs:
        return
    rows = [list(row) for row in small.orders]
    bare_rows = [[op for op in row if op.kind != Kind.W] for row in rows]
    weights = bare_rows != rows
    seen: set[tuple[tuple[Op, ...], ...]] = set()
    for n in range(1, MAX_BLOCK + 1):
        for cut in range(m_small):
            if stop():
                return
            variants: list[tuple[str, list[list[Op]] | None]] = []
            full = [stretch_order(row, delta, cut, n) for row in rows]
            variants.append(("as-is", None if any(r is None for r in full) else full))
            if weights:
                bare = [stretch_order(row, delta, cut, n) for row in bare_rows]
                variants.append(("refilled", None if any(r is None for r in bare)
                                 else refill_weight_grads(inst, bare)))
            for variant, orders in variants:
                key = None if orders is None else tuple(tuple(r) for r in orders)
                if key is None or key in seen:
                    continue
                if stop():  # before each candidate too: a cut can give two
                    return
                seen.add(key)
                yield Schedule(orders, name=f"stretch-m{m_small}-n{n}-c{cut}-{variant}")

