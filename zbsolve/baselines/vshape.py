"""V-shape schedules: 1F1B-V, ZB-V, V-Half and V-Min (two chunks per device, V placement).

Device r holds chunk 0 = stage r and chunk 1 = stage 2p-1-r, so a microbatch goes down the
devices on chunk 0, turns on device p-1 and comes back up on chunk 1; its backward runs the
same path in reverse. The families come from one list scheduler (``_greedy``) that differs
only in its priority rule and its per-device memory cap, except ZB-V on equal stages:

- 1F1B-V: full backward B ops, one forward then one backward, cap 2p chunk activations;
- ZB-V: the Zero Bubble authors' phased construction (``zbv.py``) reproduces the published
  ZB-V; the list scheduler (I/W split, forwards first, chunk 1 before chunk 0, W's fill
  waits, cap 2p) is its fallback and competitor on uneven stages;
- V-Min / V-Half: the Controllable-Memory building block (slot offsets of F0, F1, B1, B0 on
  device i, repeated every 6 unit slots, W's in the free slots) fixes the order; running it
  as soon as possible squeezes out the empty slots. In warm-up a device may run its next
  forward early while the block's later memory stays under the family's peak; after its last
  chunk-0 forward (cool-down) W's only fill waits and the next F1, I1 or I0 runs when ready.

1F1B-V and the list-scheduler ZB-V try a few variants of their rule (holding a chunk-0
forward that would still run when chunk 1's input arrives, with some slack or none; for ZB-V
also the memory room kept for the way back) and keep the one the simulator rates best: makespan for 1F1B-V,
longest per-device span for ZB-V (the papers' metrics).

Why a scheduler rather than fixed index formulas: it works for any per-stage times and comm
(the simulation inside uses the instance's real durations), and every order it emits is
deadlock-free for *any* durations: ops are committed one at a time, each only after its
inputs, so the commit order is one topological order of the task DAG and every device's
order is a subsequence of it. The simulator (``zbsolve.simulate``) then recomputes
the times; it is the judge, the scheduler only proposes an order.

Memory is tracked in the instance's units (F start allocates activation, I end frees
activation - weight, W end frees weight, B end frees activation), the simulator's model, with
the cap = peak chunk activations x the device's largest chunk activation. A chunk-0 forward
is admitted only if one chunk-1 forward still fits afterwards (pending W's are run first when
that frees enough), so the oldest microbatch can always turn and the scheduler cannot
deadlock on memory; ZB-V variants also keep room for every microbatch already past the turn
(on its way back up), so a device full of new chunk-0 work does not stall the way back. In
the block families the block's own next op always may run (the cap only limits the
reordering), since the block order is valid by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from zbsolve.baselines import zbv
from zbsolve.baselines.common import NotApplicable, make, renumbered_v, v_shape_stages
from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import simulate

EPS = 1e-9
_BIG = math.inf

PriorityFn = Callable[[int, Op, "Op | None"], tuple]
"""(device, op, the device's previous op) -> sort key; the ready op with the smallest key runs."""


@dataclass(frozen=True)
class VPlan:
    """What distinguishes one V family from another inside the list scheduler."""

    name: str
    cap_chunks: tuple[int, ...]  # per device: most live chunk activations allowed
    split: bool  # I/W split (True) or fused full backward B (False)
    priority: PriorityFn
    skeleton: tuple[tuple[Op, ...], ...] | None = None  # per device: block order to follow
    hold_slack: float | None = None  # hold chunk-0 forwards for chunk 1 (None: never)
    reserve_returning: bool = False  # keep room for microbatches already on their way back


# ---------------------------------------------------------------------- building blocks
def block_offsets(family: str, p: int, i: int) -> tuple[int, int, int, int]:
    """Slot offsets of F(chunk 0), F(chunk 1), B(chunk 1), B(chunk 0) on device i.

    From the Controllable-Memory paper's building blocks (unit slots, period 6); B is the
    input backward (our I). Offsets are pairwise distinct modulo 6, so repeating the block
    every 6 slots never puts two ops in one slot; the two free residues take the W's.
    """
    if family == "v-min":
        d = 2 if p % 3 == 0 else 0
        return (i, 2 * p - i - 1, 2 * p + d + i, 4 * p + d - i - 1)
    if family == "v-half":
        d = 3 if p % 2 == 0 else 0
        return (2 * i, 3 * p - i - 2, 3 * p + d + 2 * i - 1, 6 * p + d - i - 2)
    raise ValueError(f"unknown building block {family!r}; expected 'v-min' or 'v-half'")


def block_peak(family: str, p: int) -> int:
    """Peak live chunk activations of the family (1F1B = 2p), as the paper states it."""
    if family == "v-min":
        return 2 * ((p + 4) // 3)
    if family == "v-half":
        return 2 * ((p + 2) // 2)
    raise ValueError(f"unknown building block {family!r}")


def block_skeleton(family: str, inst: Instance) -> tuple[tuple[Op, ...], ...]:
    """Per device: the repeated block as one op order, W's in the free slots.

    Microbatch j's F0, F1, I1, I0 sit at the block offsets + 6j. Each slot that no F/I takes
    runs the oldest W whose I has ended (the block's W slots); the W's left at the end follow.
    """
    p, m = inst.devices, inst.microbatches
    out = []
    for i in range(p):
        s0, s1 = i, 2 * p - 1 - i
        o = block_offsets(family, p, i)
        slots: dict[int, Op] = {}
        for j in range(m):
            slots.update({o[0] + 6 * j: Op("F", s0, j), o[1] + 6 * j: Op("F", s1, j),
                          o[2] + 6 * j: Op("I", s1, j), o[3] + 6 * j: Op("I", s0, j)})
        if len(slots) != 4 * m:  # offsets must differ modulo 6; see block_offsets
            raise ValueError(f"{family}: block offsets collide on device {i} for p = {p}")
        order: list[Op] = []
        pending: list[Op] = []
        for t in range(max(slots) + 1):
            if t in slots:
                order.append(slots[t])
            elif pending:
                order.append(pending.pop(0))
            if t in slots and slots[t].kind == "I":
                pending.append(Op("W", slots[t].stage, slots[t].mb))
        out.append(tuple(order + pending))
    return tuple(out)


def _forward_first(p: int) -> PriorityFn:
    """ZB-V: chunk-1 forward, chunk-0 forward, chunk-1 input backward, chunk-0 input
    backward; older microbatch first. Forwards first keeps the chunk-1 turn moving (each
    hop of a microbatch's way back waits on the next device); W's only fill waits."""
    rank = {("F", 1): 0, ("F", 0): 1, ("I", 1): 2, ("I", 0): 3, ("B", 1): 2, ("B", 0): 3,
            ("W", 1): 4, ("W", 0): 4}

    def key(d: int, op: Op, last: Op | None) -> tuple:
        return (rank[op.kind, 1 if op.stage >= p else 0], op.mb)

    return key


def _alternate(d: int, op: Op, last: Op | None) -> tuple:
    """1F1B: after a forward prefer a backward and vice versa (one F, one B in steady state)."""
    is_f = op.kind == "F"
    prefer = last is None or (last.kind == "F") != is_f
    return (0 if prefer else 1, op.mb, -op.stage if is_f else op.stage)


# ---------------------------------------------------------------------- the list scheduler
@dataclass
class _Device:
    stages: tuple[int, int]  # chunk 0, chunk 1
    next_f: list[int]  # per chunk: next microbatch to forward
    next_b: list[int]  # per chunk: next microbatch to backward (I or B)
    pending_w: list[Op]  # W's whose I has run, FIFO
    mem: float
    cap: float
    free: float
    order: list[Op]
    done: set[Op] = field(default_factory=set)
    sk_pos: int = 0  # skeleton mode: index of the first op not yet run


def _greedy(inst: Instance, plan: VPlan) -> list[list[Op]]:
    p, m = inst.devices, inst.microbatches
    pairs = v_shape_stages(inst, plan.name)
    devs = []
    for d, (s0, s1) in enumerate(pairs):
        unit = max(inst.activation[s0], inst.activation[s1])
        devs.append(_Device((s0, s1), [0, 0], [0, 0], [], 0.0, plan.cap_chunks[d] * unit, 0.0, []))
    ready: dict[Op, float] = {}  # F, I or B -> output time
    back = "I" if plan.split else "B"
    graph = TaskGraph(inst, fused=not plan.split)

    def ready_time(op: Op) -> float:
        t = 0.0
        for pred, delay in graph.preds(op):
            r = ready.get(pred)
            if r is None:
                return _BIG
            t = max(t, r + delay)
        return t

    def f_admissible(dev: _Device, chunk: int) -> tuple[bool, bool]:
        """(fits now, would fit after flushing pending W's)."""
        s0, s1 = dev.stages
        need = inst.activation[dev.stages[chunk]]
        if chunk == 0:
            # keep room for one chunk-1 forward: the oldest microbatch can always turn
            slots = 1
            if plan.reserve_returning:
                turn = inst.devices  # first chunk-1 stage: a microbatch past it is coming back
                slots += sum(1 for j in range(dev.next_f[1], dev.next_f[0])
                             if Op("F", turn, j) in ready)
            need += inst.activation[s1] * slots
        held_w = sum(inst.weight[w.stage] for w in dev.pending_w)
        return dev.mem + need <= dev.cap + EPS, dev.mem - held_w + need <= dev.cap + EPS

    def skeleton_cands(d: int, dev: _Device) -> list[tuple[float, Op]]:
        """The next op of the block order, plus the reorderings warm-up and cool-down allow."""
        sk = plan.skeleton[d]
        while dev.sk_pos < len(sk) and sk[dev.sk_pos] in dev.done:
            dev.sk_pos += 1
        if dev.sk_pos == len(sk):
            return []
        if dev.next_f[0] == m:
            return cooldown_cands(dev, sk)
        head = sk[dev.sk_pos]
        cands = [(ready_time(head), head)]
        if dev.next_b != [0, 0]:
            return cands  # steady state: follow the block order
        # Warm-up: the next forward of each chunk may run early. Pulling F at position k
        # raises memory by its activation until the block order reaches k; memory must stay
        # under the cap at every forward in between.
        rise = peak_rise = 0.0
        seen: set[int] = set()
        for k in range(dev.sk_pos, len(sk)):
            op = sk[k]
            if op in dev.done:
                continue
            chunk = dev.stages.index(op.stage)
            if op.kind == "F":
                a = inst.activation[op.stage]
                if k > dev.sk_pos and chunk not in seen and op.mb == dev.next_f[chunk]:
                    if dev.mem + a + peak_rise <= dev.cap + EPS:
                        cands.append((ready_time(op), op))
                seen.add(chunk)
                rise += a
                peak_rise = max(peak_rise, rise)
                if len(seen) == 2:
                    break
            elif op.kind == "I":
                rise -= inst.activation[op.stage] - inst.weight[op.stage]
            else:
                rise -= inst.weight[op.stage]
        return cands

    def cooldown_cands(dev: _Device, sk: tuple[Op, ...]) -> list[tuple[float, Op]]:
        """After the last chunk-0 forward: W's only fill waits, and the next op of each
        stream (chunk-1 forwards, chunk-1 and chunk-0 input backwards) may run as soon as it
        is ready; a forward taken early must keep memory under the cap (W frees ignored)."""
        cands: list[tuple[float, Op]] = []
        seen: set[tuple[str, int]] = set()
        rise = peak_rise = 0.0
        for k in range(dev.sk_pos, len(sk)):
            op = sk[k]
            if op.kind == "W" or op in dev.done or (op.kind, op.stage) in seen:
                continue
            seen.add((op.kind, op.stage))
            if op.kind == "F":
                a = inst.activation[op.stage]
                if not cands or dev.mem + a + peak_rise <= dev.cap + EPS:
                    cands.append((ready_time(op), op))
            else:
                cands.append((ready_time(op), op))
            if len(seen) == 3:
                break
            if op.kind == "F":
                rise += inst.activation[op.stage]
                peak_rise = max(peak_rise, rise)
            else:
                rise -= inst.activation[op.stage] - inst.weight[op.stage]
        return cands

    def chunk1_arrival(dev: _Device) -> float:
        """Earliest time the awaited chunk-1 forward's input can arrive (optimistic)."""
        s1, j = dev.stages[1], dev.next_f[1]
        t = 0.0
        for k in range(s1 - 1, -1, -1):
            r = ready.get(Op("F", k, j))
            if r is not None:
                t = r
                break
        else:
            k = -1
        for s in range(k + 1, s1):
            t += (inst.hop(s - 1, s) if s > 0 else 0.0) + inst.F[s]
        return t + inst.hop(s1 - 1, s1)

    def holds(dev: _Device, f0: Op) -> bool:
        """Hold a chunk-0 forward that would still run when chunk 1's input arrives: the
        turn of an older microbatch must not wait behind a newer one."""
        if relaxed or plan.hold_slack is None or dev.next_f[1] >= dev.next_f[0]:
            return False
        start = max(dev.free, ready_time(f0))
        return start + inst.F[f0.stage] > chunk1_arrival(dev) + plan.hold_slack * inst.F[f0.stage]

    def decide(d: int, dev: _Device) -> tuple[float, Op] | None:
        cands: list[tuple[float, Op]] = []
        flush_would_help = False
        if plan.skeleton is not None:
            cands = skeleton_cands(d, dev)
        else:
            for chunk in (0, 1):
                s = dev.stages[chunk]
                if dev.next_b[chunk] < m and dev.next_b[chunk] < dev.next_f[chunk]:
                    op = Op(back, s, dev.next_b[chunk])
                    cands.append((ready_time(op), op))
                if dev.next_f[chunk] < m and (chunk == 0 or dev.next_f[1] < dev.next_f[0]):
                    fits, fits_flushed = f_admissible(dev, chunk)
                    op = Op("F", s, dev.next_f[chunk])
                    if fits and not (chunk == 0 and holds(dev, op)):
                        cands.append((ready_time(op), op))
                    elif fits_flushed:
                        flush_would_help = True
        t0 = dev.free
        last = dev.order[-1] if dev.order else None
        now = [op for r, op in cands if r <= t0 + EPS]
        if now:
            return t0, min(now, key=lambda op: plan.priority(d, op, last))
        if dev.pending_w:
            nxt = min((r for r, _ in cands), default=_BIG)
            w = dev.pending_w[0]
            if flush_would_help or nxt == _BIG or (
                t0 + inst.W[w.stage] <= nxt + EPS
            ):
                return t0, w
        known = [(r, op) for r, op in cands if r < _BIG]
        if not known:
            return None
        r = min(r for r, _ in known)
        return r, min((op for rr, op in known if rr <= r + EPS),
                      key=lambda op: plan.priority(d, op, last))

    remaining = 2 * m * (3 if plan.split else 2) * p
    # A device's choice changes only when it runs an op or a neighbour produces its input.
    cached: list[tuple[float, Op] | None] = [None] * p
    stale = set(range(p))
    relaxed = False
    while remaining:
        best: tuple[float, int, Op] | None = None
        for d in stale:
            cached[d] = decide(d, devs[d])
        stale.clear()
        for d, choice in enumerate(cached):
            if choice is not None and (best is None or choice[0] < best[0] - EPS):
                best = (choice[0], d, choice[1])
        if best is None and not relaxed:  # every device holds: let them go this once
            relaxed = True
            stale = set(range(p))
            continue
        if best is None:  # cannot happen with the reservation rule; say so loudly if it does
            raise RuntimeError(f"{plan.name}: internal list-scheduler deadlock ({remaining} ops left)")
        relaxed = False
        start, d, op = best
        dev = devs[d]
        end = start + inst.duration(op.kind, op.stage)
        dev.free = end
        dev.order.append(op)
        dev.done.add(op)
        remaining -= 1
        stale.add(d)
        stale.update(graph.device(nxt) for nxt, _ in graph.succs(op)
                     if graph.device(nxt) is not None)  # not the step's implicit jobs
        ready[op] = end
        chunk = dev.stages.index(op.stage)
        if op.kind == "F":
            dev.next_f[chunk] += 1
            dev.mem += inst.activation[op.stage]
        elif op.kind == "W":
            dev.pending_w.remove(op)
            dev.mem -= inst.weight[op.stage]
        else:
            dev.next_b[chunk] += 1
            if op.kind == "I":
                dev.mem -= inst.activation[op.stage] - inst.weight[op.stage]
                dev.pending_w.append(Op("W", op.stage, op.mb))
            else:
                dev.mem -= inst.activation[op.stage]
    return [dev.order for dev in devs]


# ---------------------------------------------------------------------- the families
def _best_of(inst: Instance, name: str, plans: list[VPlan], by_span: bool,
             extra: tuple[Schedule, ...] = ()) -> Schedule:
    """Run each rule set, judge each order (and the ``extra`` schedules, which come first)
    with the simulator, keep the best.

    No single priority rule wins everywhere (holding a forward for the chunk-1 turn pays
    with comm and uneven times, costs a little at unit cost), so the family tries a few.
    Ties go to the earlier candidate, so the result is deterministic.
    """
    scored = []
    scheds = list(extra) + [make(inst, name, _greedy(inst, plan)) for plan in plans]
    for k, sched in enumerate(scheds):
        r = simulate(inst, sched)
        score = (r.max_span, r.makespan) if by_span else (r.makespan, r.max_span)
        scored.append((score, k, sched))
    return min(scored, key=lambda x: x[:2])[2]


@renumbered_v
def one_f_one_b_v(inst: Instance) -> Schedule:
    """1F1B on the V with full backward B ops, at the 1F1B peak of 2p chunk activations.

    One forward, one backward in steady state; judged by makespan (as 1F1B is)."""
    v_shape_stages(inst, "1f1b-v")
    p = inst.devices
    cap = (2 * p,) * p
    plans = [VPlan("1f1b-v", cap, split=False, priority=_alternate),
             VPlan("1f1b-v", cap, split=False, priority=_alternate, hold_slack=0.25),
             VPlan("1f1b-v", cap, split=False, priority=_forward_first(p), hold_slack=0.25)]
    return _best_of(inst, "1f1b-v", plans, by_span=False)


def _authors_setting(inst: Instance) -> bool:
    """Equal times and memory on every stage: the setting the authors' ZB-V is built for."""
    return inst.uniform and len(set(inst.activation)) == 1 and len(set(inst.weight)) == 1


def _greedy_zb_v_plans(inst: Instance) -> list[VPlan]:
    p = inst.devices
    cap = (2 * p,) * p
    return [VPlan("zb-v", cap, split=True, priority=_forward_first(p), hold_slack=slack,
                  reserve_returning=returning)
            for returning, slack in ((False, 0.25), (False, 0.0), (True, 0.5), (True, 0.25))]


@renumbered_v
def zb_v(inst: Instance) -> Schedule:
    """ZB-V: I/W split on the V, W's fill the waits, at the 1F1B peak (2p chunk activations).

    The Zero Bubble authors' phased construction (``zbsolve.baselines.zbv``), best of its
    four fill settings by the longest per-device span (the ZB-V column's metric); it
    reproduces the arXiv ZB-V column. On instances with uneven stages (which that
    construction is not designed for) the generic list-scheduler variants compete too and
    the simulator picks; where the construction's counting rules do not apply (very few
    microbatches, uneven memory) only the list scheduler runs.
    """
    v_shape_stages(inst, "zb-v")
    built = zbv.candidates(inst)
    best = min(built, key=lambda c: (c.max_span, c.makespan), default=None)
    if best is not None and _authors_setting(inst):
        return make(inst, "zb-v", best.orders)
    plans = _greedy_zb_v_plans(inst)
    extra = () if best is None else (make(inst, "zb-v", best.orders),)
    return _best_of(inst, "zb-v", plans, by_span=True, extra=extra)


def _from_block(inst: Instance, family: str) -> Schedule:
    v_shape_stages(inst, family)
    p = inst.devices
    skeleton = block_skeleton(family, inst)
    rank = [{op: k for k, op in enumerate(order)} for order in skeleton]
    plan = VPlan(family, (block_peak(family, p),) * p, split=True,
                 priority=lambda d, op, last: (rank[d][op],), skeleton=skeleton)
    return make(inst, family, _greedy(inst, plan))


@renumbered_v
def v_min(inst: Instance) -> Schedule:
    """V-Min: about 1/3 of the 1F1B activation memory (2*floor((p+4)/3) chunk activations)."""
    return _from_block(inst, "v-min")


@renumbered_v
def v_half(inst: Instance) -> Schedule:
    """V-Half: about half of the 1F1B activation memory (2*floor((p+2)/2) chunk activations)."""
    return _from_block(inst, "v-half")


__all__ = ["NotApplicable", "VPlan", "block_offsets", "block_peak", "block_skeleton",
           "one_f_one_b_v", "v_half", "v_min", "zb_v"]
