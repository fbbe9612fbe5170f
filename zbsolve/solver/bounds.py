"""Lower bounds and memory feasibility, computed without CP-SAT.

Why these are valid
-------------------
*Microbatch relabelling.* All ops of one (kind, stage) have the same duration and the same
memory effect. Take any feasible schedule and, for every (kind, stage), hand the time slots it
uses to the microbatches in increasing order (the earliest slot to microbatch 0, ...). If a
bijection ``sigma`` satisfies ``a[sigma(j)] >= b[j] + c`` for all j, then the sorted sequences
satisfy ``a_(i) >= b_(i) + c`` for every rank i; applied along each dependency edge (F->F,
F->I, I->I, I->W) this keeps every precedence, devices see the same busy intervals, and the
memory of a device (a count of F starts, I ends and W ends per stage) is unchanged at every
instant. So some optimal schedule runs every (kind, stage) in microbatch order, and bounds that
assume this order ("sorted" bounds) are valid for the instance. The CP-SAT model's symmetry
breaking rests on the same argument.

*Memory.* Device d holds stages s1 < ... < sk. For any microbatch j, F(sk, j) starts after
F(s1..s(k-1), j) have started (forward chain) and before any I(s, j) with s < sk can end
(backward chain), so at that instant the activations of all k stages for j are alive: every
schedule peaks at >= sum of activation[s] on d. Running the microbatches one at a time (all ops
of microbatch 0, then 1, ...) reaches exactly that peak on every device at once (weight <=
activation, so the W-held parts never add up to more). Hence ``min_memory_limit`` is the exact
smallest feasible per-device limit, and ``serial_schedule`` is a witness that fits it.

*Memory with modes.* Where the instance offers recompute or offload, a unit of stage s holds
at least ``cheapest(s)`` (the least of its modes' ``kept``) between its forward and its
backward, and its whole activation from its forward's start to its end and again from its
backward's start. At F(s_i, j)'s start the lower stages s_1..s_(i-1) of d hold their units of
j (forwards done, backwards not begun): every schedule peaks at >= max_i (activation[s_i] +
sum_{t<i} cheapest(s_t)). The serial schedule with every unit in its cheapest mode reaches
exactly that (each copy out written right after its forward), so the bound is exact again.
"""

from __future__ import annotations

import functools
import heapq
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from zbsolve.graph import END, Lifetime, TaskGraph
from zbsolve.instance import Instance, InstanceError
from zbsolve.numeric import REL_TOL, exceeds
from zbsolve.ops import Kind, Op
from zbsolve.schedule import Schedule
from zbsolve.solver import dual_feasible

MEMORY_EPS = 1e-9


class InfeasibleMemoryError(InstanceError):
    """A device's memory limit is below what any schedule needs.

    ``min_limit`` holds the smallest feasible limit for every device (not only the failing
    ones) so a caller can fix all of them at once.
    """

    def __init__(self, message: str, min_limit: list[float]):
        super().__init__(message)
        self.min_limit = min_limit


def cheapest_mode(inst: Instance, stage: int) -> str:
    """The memory mode (of those the instance offers) whose unit holds least between its
    forward and its backward; keep on a tie (it costs no extra work): ``inst.modes`` lists it
    first, and ``min`` returns the first of equal keys."""
    return min(inst.modes, key=lambda m: inst.kept(stage, m))


def min_memory_limit(inst: Instance) -> list[float]:
    """Per device: the smallest limit under which some schedule exists (see module docstring).

    Stages of different replicas never share a microbatch, so a device needs the largest of its
    replicas' one-microbatch peaks (the lower stages holding what their cheapest mode keeps),
    on top of its resident ``params``.
    """
    out = []
    for d in range(inst.devices):
        per_replica: dict[int, float] = {}
        held: dict[int, float] = {}  # per replica: what the lower stages hold
        for s in sorted(inst.stages_of(d)):
            r = inst.replica_of(s)
            per_replica[r] = max(per_replica.get(r, 0.0), held.get(r, 0.0) + inst.activation[s])
            held[r] = held.get(r, 0.0) + inst.kept(s, cheapest_mode(inst, s))
        out.append(inst.resident(d) + max(per_replica.values()))
    return out


def check_memory(inst: Instance) -> list[float]:
    """Raise InfeasibleMemoryError if any device's limit is below ``min_memory_limit``."""
    need = min_memory_limit(inst)
    bad = [d for d, (lim, n) in enumerate(zip(inst.limit, need)) if exceeds(n, lim)]
    if bad:
        parts = [f"device {d}: limit {inst.limit[d]:g} < {need[d]:g}" for d in bad]
        held = ("the weights of its stages (memory.params) and " if any(inst.params) else "")
        what = ("one activation of each stage of a device at once" if not inst.offers_modes
                else "one live activation plus what the cheapest memory mode keeps of the "
                f"device's other stages ({', '.join(m for m in inst.modes if m != 'keep')} "
                "offered)")
        hint = ""
        if not inst.offers_modes and any(len(inst.stages_of(d)) > 1 for d in bad):
            hint = ("; or offer recompute: {R, kept} / offload: {fraction, d2h}, which lower "
                    "it to one live activation plus what they keep of the other stages")
        raise InfeasibleMemoryError(
            "memory.limit: no schedule fits ("
            + "; ".join(parts)
            + f"). Every schedule holds {held}{what}; "
            f"set memory.limit to at least {[round(x, 9) for x in need]} (per device){hint}",
            need,
        )
    return need


def serial_schedule(inst: Instance) -> Schedule:
    """One microbatch at a time, I and W right after each other: fits ``min_memory_limit``.

    A last-resort schedule (slow, but it exists whenever any schedule does): the task graph's
    topological order, microbatch by microbatch, split per device.
    """
    modes = None
    if inst.offers_modes:  # every unit in its cheapest mode: the witness of min_memory_limit
        cheap = [cheapest_mode(inst, s) for s in range(inst.stages)]
        modes = {u: cheap[u[0]] for u in TaskGraph(inst).units()}
    graph = TaskGraph(inst, modes=modes)
    orders: list[list[Op]] = [[] for _ in range(inst.devices)]
    for op in graph.topological(implicit=False):  # the step's jobs are no order's
        d = graph.device(op)
        if d is not None and op.kind != "O":
            orders[d].append(op)
            if op.kind == "F" and graph.mode(*op.unit) == "offload":
                orders[d].append(op._replace(kind="O"))  # frees before the next forward
    return Schedule(orders, name="serial")


# ---------------------------------------------------------------------- heads and tails
class MemoryEdge(NamedTuple):
    """start F(stage, j + lag) >= end (kind, source, j) for every microbatch j (microbatch order)."""

    kind: str  # "I" or "W": the op of microbatch j that must end first
    source: int  # its stage (on the same device as ``stage``)
    stage: int  # the forward's stage
    lag: int


def memory_edges(inst: Instance, d: int) -> list[MemoryEdge]:
    """Precedences that device d's memory limit forces in microbatch order (only those with
    lag < m). Stages of d: s_1 < ... < s_k; A_s = activations of d's stages <= s, w_s = the
    part of s's activation its W keeps. Each edge is "if not, the device holds more than its
    limit at the forward's start" (``limit`` net of the resident params):

    1. I(s, j) -> F(t, j+L) for s <= t, L = floor((limit - A_t) / A_s) + 1. If F(t, j+L) starts
       before I(s, j) ends, microbatch j+L holds A_t (its forwards on d up to t have started,
       its input backwards there all wait on I(t, j+L)) and each of j..j+L-1 holds A_s (their
       forwards up to s have started, by microbatch order; their input backwards up to s wait
       on I(s, .), which in microbatch order waits on I(s, j)): L·A_s + A_t > limit.
       With s = t: I(s, j) -> F(s, j+L), L = floor(limit / A_s).
    2. W(s, j) -> F(t, j+L) for s <= t, w_s > 0, L = floor((limit - A_t) / w_s) + 1: likewise
       microbatch j+L holds A_t and each of j..j+L-1 still holds s's kept part (F(s, .) has
       started; W(s, .) waits on W(s, j) in microbatch order).
    3. I(t, j) -> F(s, j+L) for s < t, L = floor((limit - A_t) / A_s) + 1 (the higher stage's
       input backward before the lower stage's forward). Suppose F(s, j+L) starts before
       I(t, j) ends. If it starts before F(t, j) does, then when F(t, j) starts microbatch j
       holds A_t and each of j+1..j+L holds A_s (their forwards up to s have started, by
       microbatch order; their input backwards at s wait on I(t, .) of themselves, which come
       after F(t, j)). Otherwise, when F(s, j+L) starts, F(t, j) has started and I(t, j) has
       not ended, so j holds A_t, and each of j+1..j+L holds A_s (input backwards at s wait on
       I(s, j), which waits on I(t, j)). Either way L·A_s + A_t > limit. (This dominates the
       earlier F(t, j) -> F(s, j+L), whose proof was the first case alone.)

    With two replicas (issue 18) the edges are stated per replica, over the device's stages of
    that replica: what the other replica holds is at least nothing, and its microbatches are
    the other parity, so "L microbatches later" is L·replicas indices later (``lag``, in
    microbatch indices, as every consumer reads it).
    """
    limit = inst.limit[d]
    if limit is None or inst.segments != 1 or inst.offers_modes:
        # The argument walks one chain of unsegmented units: with segments a unit's memory is
        # split over ops, and a recomputed or offloaded unit holds less than its activation
        # between F and I. With overlapped pairs it holds as it is: it counts what the device
        # holds as a forward starts, alone or in a pair, whose backward holds its unit until
        # the pair ends.
        return []
    limit -= inst.resident(d)
    # the W edges read the Ws' microbatch order, which a stage whose W a pair may absorb does
    # not keep (``TaskGraph.same_class_prev``)
    absorbable = TaskGraph(inst).absorbable if inst.overlap is not None else frozenset()
    out = []
    for r in range(inst.replicas):
        stages = sorted(s for s in inst.stages_of(d) if inst.replica_of(s) == r)
        out += _replica_edges(inst, limit, stages, absorbable)
    return [e for e in out if e.lag < inst.microbatches]


def _replica_edges(inst: Instance, limit: float, stages: list[int],
                   absorbable: frozenset[int]) -> list[MemoryEdge]:
    """``memory_edges`` among one replica's ``stages`` of a device (``limit`` net of params)."""
    below = {s: sum(inst.activation[t] for t in stages if t <= s) for s in stages}

    def lag(room: float, each: float) -> int:  # in microbatch indices of the replica
        return (int(math.floor(room / each + 1e-9)) + 1) * inst.replicas

    out = []
    for i, s in enumerate(stages):
        for t in stages[i:]:
            room = limit - below[t]
            out.append(MemoryEdge("I", s, t, lag(room, below[s])))
            if inst.weight[s] > 0 and s not in absorbable:
                out.append(MemoryEdge("W", s, t, lag(room, inst.weight[s])))
            if t > s:
                out.append(MemoryEdge("I", t, s, lag(room, below[s])))
    return out


def in_flight_caps(inst: Instance, d: int) -> dict[int, int]:
    """Per stage s of device d: L with F(s, j+L) after I(s, j) (``memory_edges``' first kind),
    in microbatches of s's replica."""
    return {e.stage: e.lag // inst.replicas for e in memory_edges(inst, d)
            if e.kind == "I" and e.source == e.stage}


def memory_precedences(inst: Instance) -> dict[int, list[MemoryEdge]]:
    """Stage -> the ``memory_edges`` into its forwards, over all devices."""
    into: dict[int, list[MemoryEdge]] = {}
    for d in range(inst.devices):
        for e in memory_edges(inst, d):
            into.setdefault(e.stage, []).append(e)
    return into


def _preds(graph: TaskGraph, op: Op, ordered: bool,
           mem: dict[int, list[MemoryEdge]] | None = None) -> list[tuple[Op, float]]:
    """Graph predecessors (edge weight = pred's least duration + delay, ``min_duration``), plus
    the sorted-chain edge and, with ``mem``, the memory edges into a forward (both valid in
    microbatch order)."""
    out = [(q, graph.min_duration(q) + c) for q, c in graph.preds(op)]
    if ordered:
        q = graph.same_class_prev(op)
        if q is not None:
            out.append((q, graph.min_duration(q)))
        if mem and op.kind == Kind.F and op.stage in mem:
            for e in mem[op.stage]:
                if op.mb >= e.lag:
                    q = Op(e.kind, e.source, op.mb - e.lag)  # memory edges: unsegmented
                    out.append((q, graph.min_duration(q)))
    return out


@dataclass(frozen=True)
class Edges:
    """The start-to-start edges of ``_preds`` over ``ops`` (a topological order), by index:
    ``preds[i]`` and ``succs[i]`` list (other op's index, weight). One walk of the graph that
    the longest-path walks share (``heads_tails``, ``all_device_tails``, ``state_bound``,
    ``projected``);
    edges from ops outside ``ops`` are left out."""

    ops: list[Op]
    index: dict[Op, int]
    preds: list[list[tuple[int, float]]]
    succs: list[list[tuple[int, float]]]


def edges(graph: TaskGraph, ops: list[Op], ordered: bool,
          mem: dict[int, list[MemoryEdge]] | None = None) -> Edges:
    """``_preds`` of every op of ``ops`` (topological), by index (``Edges``)."""
    index = {op: i for i, op in enumerate(ops)}
    preds: list[list[tuple[int, float]]] = []
    succs: list[list[tuple[int, float]]] = [[] for _ in ops]
    for i, op in enumerate(ops):
        ps = [(index[q], w) for q, w in _preds(graph, op, ordered, mem) if q in index]
        for j, w in ps:
            succs[j].append((i, w))
        preds.append(ps)
    return Edges(ops, index, preds, succs)


@dataclass
class HeadsTails:
    """Per op: head = earliest start, tail = least time from its end to the last op's end."""

    head: dict[Op, float]
    tail: dict[Op, float]
    ordered: bool  # True: assumes microbatch order per (kind, stage) (valid, see docstring)


def heads_tails(inst: Instance, ordered: bool = True, source: Op | None = None,
                graph: TaskGraph | None = None) -> HeadsTails:
    """Longest paths through the task graph, plus the microbatch chains and the memory edges
    when ``ordered`` (both valid in microbatch order, see the module docstring); without them
    ``unordered_heads_tails``.

    With ``source`` the heads are measured from that op's start (ops not reachable from it get
    head 0).
    """
    if not ordered:
        return unordered_heads_tails(inst, source, graph)
    graph = graph or TaskGraph(inst)
    return _walk(graph, graph.topological(), True, source, memory_precedences(inst))


def unordered_heads_tails(inst: Instance, source: Op | None = None,
                          graph: TaskGraph | None = None) -> HeadsTails:
    """Longest paths through the task graph alone (no microbatch chains, no memory edges).

    Without the chains every microbatch of a replica is the same chain, so only the replica's
    first one is walked and copied to the others: this keeps big instances cheap. With
    ``source`` only the source's own microbatch is walked, its heads measured from the
    source's start (ops not reachable from it get head 0). The ops that join microbatches
    (SYNC, the step's jobs) are walked after the copies (``_joined_heads_tails``).
    """
    graph = graph or TaskGraph(inst)
    R = inst.replicas
    firsts = [source.mb] if source is not None else list(range(min(R, inst.microbatches)))
    one = _walk(graph, graph.topological(firsts, implicit=False), False, source)
    if source is not None:
        return one
    head = {op._replace(mb=j): h for op, h in one.head.items()
            for j in range(op.mb, inst.microbatches, R)}
    tail = {op._replace(mb=j): t for op, t in one.tail.items()
            for j in range(op.mb, inst.microbatches, R)}
    _joined_heads_tails(graph, head, tail)
    return HeadsTails(head, tail, False)


def _joined_heads_tails(graph: TaskGraph, head: dict[Op, float], tail: dict[Op, float]) -> None:
    """Heads and tails of the jobs that join microbatches (SYNC, the step's reductions and
    optimizer steps, in topological order) on top of the units' copied ones, and the tails of
    the units' last ops through them.

    The tails of the units' other ops stay what their own microbatch's walk gave (shorter than
    the truth, so still valid); the tail rule's device order is not a graph edge and is left
    out, which only makes heads and tails smaller (valid)."""
    units = list(tail)
    joined = [*graph.implicit_ops(), *graph.tail_ops()]
    for op in joined:  # each has inputs: its stage's last ops, or the joined jobs before it
        head[op] = max(head[q] + graph.min_duration(q) + c for q, c in graph.preds(op))
    for op in reversed(joined):
        tail[op] = max((c + graph.min_duration(n) + tail[n] for n, c in graph.succs(op)),
                       default=0.0)
    for op in units:  # a unit's last op feeds its stage's reduction (SYNC or AR), no delay
        for n in graph.implicit_successors(op):
            tail[op] = max(tail[op], graph.min_duration(n) + tail[n])


def _walk(graph: TaskGraph, topo: list[Op], ordered: bool, source: Op | None,
          caps: dict[int, list[MemoryEdge]] | None = None) -> HeadsTails:
    e = edges(graph, topo, ordered, caps)
    n = len(topo)
    head = [0.0] * n
    reached = [False] * n  # every op without a source; else those the source reaches
    for i, op in enumerate(topo):
        cands = [head[j] + w for j, w in e.preds[i] if reached[j]]
        head[i] = max(cands, default=0.0)
        reached[i] = source is None or op == source or bool(cands)
    dur = [graph.min_duration(op) for op in topo]
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        # tail(i) >= w - dur(i) + dur(k) + tail(k); w - dur(i) is the comm delay
        tail[i] = max((w - dur[i] + dur[k] + tail[k] for k, w in e.succs[i]), default=0.0)
    if graph.overlap and source is None:
        head = _alone_until_paired(graph, e, head, dur)
    return HeadsTails(dict(zip(topo, head)), dict(zip(topo, tail)), ordered)


def _stage_pair_starts(graph: TaskGraph, head: dict[Op, float]
                       ) -> tuple[dict[int, float], dict[int, float]]:
    """Per stage, the earliest an overlapped pair can start with one of its forwards, and with
    one of its backwards: a pair starts with both of its ops, so no earlier than the later of
    their heads; taken over the (forward stage, backward stage) pairs the instance allows,
    each op at its stage's least head. Stages without pairs are absent."""
    first: dict[tuple[bool, int], float] = {}
    for op, t in head.items():
        if op.kind in (Kind.F, Kind.I, Kind.B):
            key = (op.kind == Kind.F, op.stage)
            first[key] = min(first.get(key, math.inf), t)
    fwd: dict[int, float] = {}
    bwd: dict[int, float] = {}
    for d in range(graph.inst.devices):
        for a, b, _ in graph.pair_options(d):
            t = max(first.get((True, a), math.inf), first.get((False, b), math.inf))
            fwd[a], bwd[b] = min(fwd.get(a, math.inf), t), min(bwd.get(b, math.inf), t)
    return fwd, bwd


def _alone_until_paired(graph: TaskGraph, e: Edges, head: list[float],
                        dur: list[float]) -> list[float]:
    """Heads again where a forward or backward that no pair can hold yet runs alone, at its
    whole duration.

    An op of a pair starts with its partner, so no earlier than its stage's pair start
    (``_stage_pair_starts`` of the first pass's heads; a W in its unit's fused backward: its
    stage's backward one). One that starts at s before it runs alone, so its end >= min(s +
    duration, max(s, pair start) + min_duration), which only grows with s: it holds at s =
    its head. Why: the first microbatch's forwards run before any backward exists, and a V
    device's last stage pairs only with its first stage's backwards, the last of a round
    trip; at the pair share they cost the overlapped bench rows 7-15 of their analytic bound
    (docs/solver.md, "Overlapped pairs start late"). Tails are left as they are: mirrored,
    the same argument holds, but it moved no bench row's bound and no test could tell a
    wrong version of it from a right one."""
    ops = e.ops
    fwd, bwd = _stage_pair_starts(graph, dict(zip(ops, head)))
    out, reach = [0.0] * len(ops), [0.0] * len(ops)
    for i, op in enumerate(ops):
        out[i] = max((reach[j] + w - dur[j] for j, w in e.preds[i]), default=0.0)
        if op.kind in (Kind.F, Kind.I, Kind.B, Kind.W):
            pair = (fwd if op.kind == Kind.F else bwd).get(op.stage, math.inf)
            reach[i] = min(out[i] + graph.duration(op), max(out[i], pair) + dur[i])
        else:
            reach[i] = out[i] + dur[i]
    return out


def _one_machine_bound(jobs: list[tuple[float, float, float]]) -> float:
    """Head-body-tail bound of one machine: the value of Jackson's preemptive schedule.

    ``jobs`` = (head, duration, tail). Run, at every moment, the released job with the largest
    tail, preempting when a job with a larger tail is released; the bound is the largest
    completion + tail. That value equals max over every subset S of the jobs of
    min_S head + sum_S duration + min_S tail (Carlier 1982), so it is a lower bound for any
    non-preemptive schedule, and it dominates the two one-parameter families of subsets
    ({head >= t}, {tail >= u}) it replaced (measured: docs/solver.md).
    """
    jobs = sorted(jobs)
    best, t, i, n = 0.0, -math.inf, 0, len(jobs)
    ready: list[tuple[float, float]] = []  # (-tail, remaining duration)
    while i < n or ready:
        if not ready:
            t = max(t, jobs[i][0])
        while i < n and jobs[i][0] <= t:
            heapq.heappush(ready, (-jobs[i][2], jobs[i][1]))
            i += 1
        neg_tail, left = heapq.heappop(ready)
        release = jobs[i][0] if i < n else math.inf
        if t + left <= release:
            t += left
            best = max(best, t - neg_tail)
        else:  # run until the next release, then choose again
            heapq.heappush(ready, (neg_tail, left - (release - t)))
            t = release
    return best


def pair_start(graph: TaskGraph, head: dict[Op, float], device: int) -> float:
    """The earliest an overlapped pair can start on ``device`` (inf: none allowed): no earlier
    than both of its ops' heads (``_stage_pair_starts``)."""
    return _device_pair_start(graph, _stage_pair_starts(graph, head)[0], device)


def _device_pair_start(graph: TaskGraph, fwd: dict[int, float], device: int) -> float:
    """``pair_start`` from the forward stages' pair starts (``_stage_pair_starts``), which a
    caller bounding every device computes once."""
    return min((fwd.get(a, math.inf) for a, _, _ in graph.pair_options(device)),
               default=math.inf)


def _late_pairs_bound(jobs: list[tuple[float, float, float, float]], start: float) -> float:
    """A one-machine bound for a device whose forwards and backwards may shorten in overlapped
    pairs, where none can before ``start`` (``pair_start``). ``jobs`` = (head, min_duration,
    tail, duration): an op with min_duration < duration shortens only in a pair.

    ``_one_machine_bound`` counts every such op at its pair share x * duration, as if the
    device paired from its first op; but before the first pair can start an op runs alone,
    at its whole duration, which removes only x of it from the work left. For a set S of the
    device's ops (h its least head, q its least tail, P its summed min_durations) let r be the
    earliest a pair or an op of S that never pairs can start (min of ``start`` and those
    ops' heads). If S's last op ends at or after r, the device time in [h, T - q] holds the
    time in [h, r) that S does not use, plus P, plus (1 - x) of the duration of every op of S
    that started alone before r; those cover the A <= min(r - h, D) of [h, r) that S uses (D:
    the durations of S's pairing ops with heads before r; x: the largest min_duration /
    duration among them). So T >= h + q + P + (r - h) - x A. Otherwise every op of S ended
    before r, alone: T >= h + q + S's whole durations. The bound is the lesser of the two,
    for S each set {tail >= u} (the nested family ``_one_machine_bound`` once used)."""
    heads = sorted({h for h, p, _, d in jobs if p < d})
    rank = {h: i for i, h in enumerate(heads)}
    tree = [0.0] * (len(heads) + 1)  # Fenwick tree: durations of S's pairing ops by head

    def add(i: int, d: float) -> None:
        i += 1
        while i < len(tree):
            tree[i] += d
            i += i & -i

    def before(r: float) -> float:  # durations of S's pairing ops with head < r
        i, s = bisect_left(heads, r), 0.0
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s

    best, h, work, whole, alone, x = 0.0, math.inf, 0.0, 0.0, math.inf, 0.0
    jobs = sorted(jobs, key=lambda j: -j[2])
    for k, (head, p, tail, d) in enumerate(jobs):
        h, work, whole = min(h, head), work + p, whole + d
        if p < d:
            x = max(x, p / d)
            add(rank[head], d)
        else:
            alone = min(alone, head)
        if k + 1 < len(jobs) and jobs[k + 1][2] == tail:
            continue  # the set {tail >= u} once it holds every op of tail u
        r = min(start, alone)
        if r > h:
            late = h + tail + work + (r - h) - x * min(r - h, before(r))
            best = max(best, min(late, h + tail + whole))
    return best


def device_tails(inst: Instance, ht: HeadsTails, device: int) -> dict[Op, float]:
    """Per op of ``device``: the least time from its end to the end of the device's last op.

    The longest path (the DAG's edges with their delays, plus the microbatch chains and memory
    edges when ``ht`` is ordered) from the op's end to the end of any op of the same device:
    that op ends no later than the device's last one, so the device's last end >= the op's
    end + this. ``ht.tail`` is the same to the end of *any* op (the makespan's tail).
    """
    return all_device_tails(inst, ht, [device])[device]


def all_device_tails(inst: Instance, ht: HeadsTails, devices: Iterable[int]
                     ) -> dict[int, dict[Op, float]]:
    """``device_tails`` of each of ``devices`` in one backward walk of the graph.

    Each op carries a vector, one entry per device: the longest path from its end to the end
    of an op of that device (-inf: none), so the order and edges are built once and each op
    is visited once for all devices (per device walks took 3.3 s at p = 32, m = 256, most of
    the span bound's 4-s share of a 20-s solve; the vectors take 0.7 s).
    """
    graph = TaskGraph(inst)
    # memory edges are read only when ordered (``_preds``)
    e = edges(graph, graph.topological(implicit=True), ht.ordered, memory_precedences(inst))
    topo, index = e.ops, e.index
    dur = [graph.min_duration(op) for op in topo]
    devices = list(devices)
    column = {d: k for k, d in enumerate(devices)}
    # each edge q -> op as (op's index, delay after q's end + op's duration)
    succ = [[(i, w - dur[j] + dur[i]) for i, w in out] for j, out in enumerate(e.succs)]
    # via[i][k]: the path from op i's end to the end of an op of devices[k]; where op i is on
    # that device the path may stop at op i itself (0)
    via = np.full((len(topo), len(devices)), -math.inf)
    for i in range(len(topo) - 1, -1, -1):
        if succ[i]:
            to, delay = zip(*succ[i])
            via[i] = (via[list(to)] + np.array(delay)[:, None]).max(axis=0)
        k = column.get(graph.device(topo[i]))
        if k is not None:
            via[i, k] = max(via[i, k], 0.0)
    return {d: {op: max(float(via[index[op], column[d]]), 0.0) for op in graph.device_ops(d)}
            for d in devices}


def _device_jobs(inst: Instance, ht: HeadsTails) -> list[list[tuple[float, float, float]]]:
    graph = TaskGraph(inst)
    return [[(ht.head[op], graph.min_duration(op), ht.tail[op])
             for op in (*graph.device_ops(d), *graph.tail_ops(d))] for d in range(inst.devices)]


def device_makespan_bounds(inst: Instance, ht: HeadsTails | None = None) -> list[float]:
    """Per device, a lower bound on the makespan (head-body-tail on its ops; with overlapped
    pairs also ``_late_pairs_bound``)."""
    ht = ht or heads_tails(inst)
    graph = TaskGraph(inst)
    fwd = _stage_pair_starts(graph, ht.head)[0] if graph.overlap else {}
    return [max(_one_machine_bound(jobs), _paired(graph, fwd, d, jobs))
            for d, jobs in enumerate(_device_jobs(inst, ht))]


def _paired(graph: TaskGraph, fwd: dict[int, float], device: int,
            jobs: list[tuple[float, float, float]]) -> float:
    """``_late_pairs_bound`` of ``device``'s jobs (as ``_device_jobs`` lists them; ``fwd``: the
    forward stages' pair starts), 0 without overlapped pairs."""
    if not graph.overlap:
        return 0.0
    ops = [*graph.device_ops(device), *graph.tail_ops(device)]
    return _late_pairs_bound([(h, p, q, graph.duration(op)) for (h, p, q), op in zip(jobs, ops)],
                             _device_pair_start(graph, fwd, device))


def device_lower_bounds(inst: Instance) -> list[float]:
    """Per device: earliest possible first start + total work (cheap, for large instances)."""
    graph = TaskGraph(inst)
    return [h + graph.device_min_work(d) for d, h in enumerate(graph.device_heads())]


def device_span_bounds(inst: Instance, ht: HeadsTails | None = None,
                       own_tails: bool = True) -> list[float]:
    """Per device, a lower bound on its span (its head h0 to its last end).

    Spans are measured from the device's head h0 (``TaskGraph.device_heads``), the earliest
    any of its ops can start: span >= head-body-tail over its ops - h0, with each op's tail the
    least time from its end to the end of an op of the same device (``device_tails``; the
    global tail would count work of other devices after this one's last op), and >= its work.
    """
    ht = ht or heads_tails(inst)
    graph = TaskGraph(inst)
    out = []
    own = all_device_tails(inst, ht, range(inst.devices)) if own_tails else {}
    fwd = _stage_pair_starts(graph, ht.head)[0] if graph.overlap else {}
    for d, h in enumerate(graph.device_heads()):
        tails = own.get(d, {})
        jobs = [(ht.head[op], graph.min_duration(op), tails.get(op, 0.0))
                for op in graph.device_ops(d)]
        out.append(max(_one_machine_bound(jobs) - h, _paired(graph, fwd, d, jobs) - h,
                       graph.device_min_work(d)))
    return out


def _knapsack_lp(items: list[tuple[float, float]], room: float, count: float) -> float:
    """max sum x_i work_i  s.t.  sum x_i mem_i <= room, sum x_i <= count, x >= 0.

    ``items`` = (mem, work). An LP with two constraints has an optimal vertex with at most two
    non-zero variables, so trying every single item and every pair is exact for the LP (and an
    upper bound for the integer problem it relaxes).
    """
    if room < 0:
        return 0.0
    best = 0.0
    for mem, work in items:
        x = count if mem <= 0 else min(count, room / mem)
        best = max(best, x * work)
    for i, (mi, wi) in enumerate(items):
        for mj, wj in items[i + 1:]:
            if abs(mi - mj) < 1e-12:
                continue
            xi = (room - mj * count) / (mi - mj)
            xj = count - xi
            if min(xi, xj) >= -1e-12:
                best = max(best, xi * wi + xj * wj)
    return best


def _pending_states(inst: Instance, stages: list[int]) -> list[tuple[float, float, bool]]:
    """Per-microbatch states of a device's stages after the forwards: (memory, work left, all
    I pending). A stage is done, waiting for W (holds weight) or waiting for I (holds the
    activation); the I-pending stages are the lowest ones (I(s') waits for I(s), s' < s)."""
    out = []
    k = len(stages)
    for n_i in range(k + 1):  # stages[:n_i] wait for I
        rest = stages[n_i:]
        for mask in range(1 << len(rest)):  # which of the others wait for W
            mem = sum(inst.activation[t] for t in stages[:n_i])
            work = sum(inst.I[t] + inst.W[t] for t in stages[:n_i])
            for b, t in enumerate(rest):
                if mask >> b & 1:
                    mem += inst.weight[t]
                    work += inst.W[t]
            out.append((mem, work, n_i == k))
    return out


def memory_end_bounds(inst: Instance, max_stages: int = 4) -> list[float | None]:
    """Per device: a lower bound on the end of its last op that uses its memory limit.

    Device d runs stages s_1 < ... < s_k; in microbatch order its first op is F(s_1, 0), its
    first I is I(s_k, 0) (head h_I) and its last forward is F(s_k, m-1) (start f).
    - Start: before h_I only forwards run, and they must fit the limit together (no I has ended
      yet): at most X work starts before h_I (knapsack over per-microbatch prefixes of stages).
    - End: at f every forward has started; what is left (<= Y) is F(s_k, m-1) plus the I and W
      of microbatches still holding memory, which must fit the limit with F(s_k, m-1)'s
      (knapsack over the states of ``_pending_states``); and the chain from f to the device's
      last W needs C.
    - If the limit cannot hold all m microbatches' activations then f >= h_I, the two windows
      hold different ops, and end >= h_I - min(X, h_I - h_F) + work + max(C - Y, 0).
    Exact enumeration for one stage, LP relaxations (still valid) for several. ``None`` where
    the limit is absent or never binds, or the device has more than ``max_stages`` stages.
    With overlapped pairs work is the ``min_duration`` sum: no pair runs before h_I, a pair
    lasts no longer than its two ops alone (Y) and frees its backward's unit as it ends.
    """
    out: list[float | None] = []
    m = inst.microbatches
    if inst.replicas != 1 or inst.segments != 1 or inst.offers_modes:
        # the argument walks one chain of unsegmented units, each holding its whole activation
        # from F to I: a recomputed or offloaded unit holds less in between
        return [None] * inst.devices
    graph = TaskGraph(inst)
    heads = unordered_heads_tails(inst).head
    for d in range(inst.devices):
        stages = sorted(inst.stages_of(d))
        limit = inst.limit[d]
        if limit is not None:
            limit -= inst.resident(d)
        total_act = sum(inst.activation[t] for t in stages)
        if limit is None or len(stages) > max_stages or m * total_act <= limit + MEMORY_EPS:
            out.append(None)
            continue
        first, top = stages[0], stages[-1]
        h_f = heads[Op("F", first, 0)]
        h_i = heads[Op("I", top, 0)]
        from_last = unordered_heads_tails(inst, source=Op("F", top, 0)).head
        chain = max(from_last[Op("W", t, 0)] + inst.W[t] for t in stages)
        states = _pending_states(inst, stages)
        full = [(mem, work) for mem, work, all_i in states if all_i][0]
        room = limit - full[0]
        if len(stages) == 1:
            (s,) = stages
            a, w = inst.activation[s], inst.weight[s]
            cap = int(limit / a + MEMORY_EPS)
            x = min(cap, m) * inst.F[s]
            y = 0.0
            for n in range(cap):  # n more microbatches in flight besides m-1
                left = limit - (n + 1) * a
                k = m - 1 - n if w <= 0 else min(m - 1 - n, int(left / w + MEMORY_EPS))
                y = max(y, n * (inst.I[s] + inst.W[s]) + k * inst.W[s])
        else:
            prefixes = list(zip(accumulate(inst.activation[t] for t in stages),
                                accumulate(inst.F[t] for t in stages)))
            x = _knapsack_lp(prefixes, limit, m)
            # the one state without work (every stage done; I and W are > 0) adds no vertex
            # above the others: paired with item j it gives at most j alone
            y = _knapsack_lp([(mem, work) for mem, work, _ in states if work > 0], room, m - 1)
        y += inst.F[top] + full[1]
        work = graph.device_min_work(d)
        out.append(h_i - min(x, h_i - h_f) + work + max(chain - y, 0.0))
    return out


class Ramp(NamedTuple):
    """A cap on what a device holds tau after its first start (allocations: its forwards) or
    before its last free (its I and W): c(tau) = min(step (floor(tau / every) + 1),
    step + rate tau). Of the ops of one kind on the window, all but one (the first forward,
    the first free to end) run wholly inside it, one after the other, each at least
    ``every`` long, each moving at most ``rate`` per unit of its length; each one at most
    ``step``."""

    step: float
    every: float
    rate: float

    def loss(self, room: float) -> tuple[float, float]:
        """(tau*, the memory-time the cap leaves unused below ``room`` on [0, tau*]), tau* the
        first time the cap reaches ``room``; (0, 0) where the cap is no cap (a zero-length op)
        or its staircase too fine to walk (then the bound just loses the ramp)."""
        if self.every <= 0 or not math.isfinite(self.rate) or room / self.step > 10_000:
            return 0.0, 0.0
        if self.rate <= 0 and self.step < room:  # never reaches room
            return math.inf, 0.0
        lost, k = 0.0, 0
        while self.step * (k + 1) < room:  # on [k every, (k + 1) every): min(level, line)
            x, y = k * self.every, (k + 1) * self.every
            level = self.step * (k + 1)
            cross = (level - self.step) / self.rate if self.rate > 0 else math.inf
            cut = min(max(cross, x), y)  # the line below the level on [x, cut)
            line = self.step * (cut - x) + self.rate * (cut * cut - x * x) / 2
            lost += room * (y - x) - line - level * (y - cut)
            k += 1
        tau = k * self.every
        reach = (room - self.step) / self.rate if self.rate > 0 else math.inf
        if tau < reach < math.inf:  # the staircase is at room, the line not yet
            lost += (room - self.step) * (reach - tau) - self.rate * (reach**2 - tau**2) / 2
            tau = reach
        return tau, lost


def _ramp(graph: TaskGraph, step: float, amounts: dict[Op, float]) -> Ramp:
    """The ramp of a device's forwards (what each allocates) or of its I and W (what each
    frees), each op at least its ``min_duration`` long."""
    rates = (a / graph.min_duration(op) if graph.min_duration(op) > 0 else math.inf
             for op, a in amounts.items())
    return Ramp(step, min(graph.min_duration(op) for op in amounts), max(rates))


def memory_energy_bounds(inst: Instance) -> list[float | None]:
    """Per device: a lower bound on its span from the memory-time its units must hold.

    Every lifetime of device d (``TaskGraph.device_lifetimes``: an amount held from a forward's
    start to the end of its I or W) lasts at least the longest path between those two ops, and
    lies within d's span; at every instant d holds at most its limit (net of the resident
    params), and less at the ends (``Ramp``): right after its first start it has begun few
    forwards, right before its last free few I and W remain. So the span L satisfies
    room L - loss_up - loss_down >= the sum of amount x shortest lifetime (docs/solver.md,
    "Memory-time"). This is the in-flight argument of ``memory_end_bounds`` taken over all of
    d's stages at once: on loop placements under half the 1F1B memory both of a device's
    stages hold activations for a long round trip, and their sum binds where each stage's
    count does not. The same memory-time with each unit's share weighed by a dual feasible
    function (``_memory_time``, ``_weighed``) counts a unit that leaves room for no other as the
    whole device; the larger of the two is the bound. ``None`` where the limit is absent or
    the instance offers memory modes (a recomputed or offloaded unit holds less than its
    keep-form lifetimes)."""
    graph = TaskGraph(inst)
    out: list[float | None] = []
    for d, held in enumerate(_memory_time(inst, graph)):
        if held is None:
            out.append(None)
            continue
        energy, items = held
        born, freed = {}, {}
        for lt in graph.device_lifetimes(d):
            born[lt.born] = born.get(lt.born, 0.0) + lt.amount
            freed[lt.dies] = freed.get(lt.dies, 0.0) + lt.amount
        if not born:
            out.append(0.0)
            continue
        room = _room(inst, d)
        unit = max(born.values())  # also what a fused B frees at once
        (t_up, up), (t_down, down) = (_ramp(graph, unit, born).loss(room),
                                      _ramp(graph, unit, freed).loss(room))
        span = (energy + up + down) / room
        # each loss is counted on its half of the span: valid once both ramps fit there
        weighed = [_weighed(phi, items) for phi in dual_feasible.family(x for x, _ in items)]
        out.append(max([span if span / 2 >= max(t_up, t_down) else energy / room, *weighed]))
    return out


@functools.lru_cache(maxsize=8)  # read by every model built for the instance (windows too)
def memory_stairs(inst: Instance) -> tuple[tuple[int, float] | None, ...]:
    """Per device: (k, L) for the staircase ``dual_feasible.stair(k)`` that weighs its
    memory-time the most, L that span bound, where it is more than the plain memory-time
    (else None): the model's redundant cumulative (``model._add_dual_feasible_memory``) uses
    it where L is what bounds the instance. None where ``memory_energy_bounds`` has none."""
    out: list[tuple[int, float] | None] = []
    for held in _memory_time(inst, TaskGraph(inst)):
        items = held.items if held else ()
        plain = _weighed(dual_feasible.identity, items)
        best: tuple[int, float] | None = None
        for k in range(1, dual_feasible.STAIRS + 1):
            value = _weighed(dual_feasible.stair(k), items)
            if value > max(plain * (1 + 1e-6), best[1] if best else 0.0):
                best = (k, value)
        out.append(best)
    return tuple(out)


class MemoryTime(NamedTuple):
    """What a device's units must hold: ``energy`` the sum of amount x shortest lifetime,
    ``items`` the units as (share of the room, duration) staircase pieces (``_staircase``)."""

    energy: float
    items: tuple[tuple[float, float], ...]


def _memory_time(inst: Instance, graph: TaskGraph) -> tuple[MemoryTime | None, ...]:
    """Per device: its ``MemoryTime`` (``graph``: the instance's, read by the caller too); None
    without a limit, or where the instance offers memory modes."""
    if inst.offers_modes:
        return (None,) * inst.devices
    length = _shortest_lifetimes(inst, graph)
    out: list[MemoryTime | None] = []
    for d in range(inst.devices):
        room = _room(inst, d)
        out.append(None if room is None else MemoryTime(
            sum(lt.amount * length(lt) for lt in graph.device_lifetimes(d)),
            tuple(_staircase(graph, d, length, room))))
    return tuple(out)


def _room(inst: Instance, d: int) -> float | None:
    """The most the simulator lets d hold (``numeric.exceeds``) less its params; None without
    a limit (a resident load above the limit is refused earlier)."""
    limit = inst.limit[d]
    room = None if limit is None else limit / (1 - REL_TOL) - inst.resident(d)
    return room if room is not None and room > 0 else None


def _shortest_lifetimes(inst: Instance, graph: TaskGraph) -> Callable[[Lifetime], float]:
    """A lifetime's least length: the longest path from its born boundary to its dying one
    (the same for every microbatch of a unit shape: computed once per shape)."""
    shortest: dict[tuple, float] = {}

    def length(lt: Lifetime) -> float:
        key = (lt.born._replace(mb=-1), lt.born_at, lt.dies._replace(mb=-1), lt.dies_at)
        if key not in shortest:  # walk the stage's first microbatch, from the born op's start
            first = inst.microbatches_of(lt.born.stage)[0]
            born, dies = lt.born._replace(mb=first), lt.dies._replace(mb=first)
            head = unordered_heads_tails(inst, source=born, graph=graph).head
            at_end = {op: graph.min_duration(op) if at == END else 0.0
                      for op, at in ((born, lt.born_at), (dies, lt.dies_at))}
            shortest[key] = max(0.0, head[dies] + at_end[dies] - at_end[born])
        return shortest[key]
    return length


def _staircase(graph: TaskGraph, d: int, length: Callable[[Lifetime], float], room: float
               ) -> list[tuple[float, float]]:
    """Device d's units as (share of ``room``, duration) items: a unit (its lifetimes, all
    born as its forward starts) holds at least the amounts of the lifetimes longer than x for
    the first x of its life."""
    units: dict[Op, list[tuple[float, float]]] = {}
    for lt in graph.device_lifetimes(d):
        units.setdefault(lt.born, []).append((length(lt), lt.amount))
    items: list[tuple[float, float]] = []
    for pieces in units.values():
        pieces.sort()
        held, before = sum(a for _, a in pieces), 0.0
        for span, amount in pieces:
            items.append((held / room, span - before))
            held, before = held - amount, span
    return items


def _weighed(phi: dual_feasible.Phi, items: Iterable[tuple[float, float]]) -> float:
    """The memory-time of ``items`` with each share weighed by ``phi`` (dual feasible: a
    bound on the device's span, docs/solver.md)."""
    return sum(phi(x) * t for x, t in items)


def critical_path(inst: Instance) -> float:
    """Longest chain through the task graph (unlimited devices, no resource conflicts)."""
    ht = unordered_heads_tails(inst)
    graph = TaskGraph(inst)
    return max(ht.head[op] + graph.min_duration(op) + ht.tail[op] for op in ht.head)


def analytic_bound(inst: Instance, objective: str = "makespan") -> float:
    """A lower bound on the optimum without CP-SAT, for ``makespan`` or ``span``."""
    if objective not in ("makespan", "span"):
        raise ValueError(f"objective: expected 'makespan' or 'span', got {objective!r}")
    mem = memory_end_bounds(inst)
    energy = memory_energy_bounds(inst)  # spans
    heads = TaskGraph(inst).device_heads()
    if objective == "makespan":
        ends = [*mem, *(None if e is None else h + e for h, e in zip(heads, energy))]
        return max(max(device_makespan_bounds(inst)), critical_path(inst),
                   max((b for b in ends if b is not None), default=0.0))
    # spans are measured from the device's head (``TaskGraph.device_heads``)
    return max(max(device_span_bounds(inst)),
               max((b - h for b, h in zip(mem, heads) if b is not None), default=0.0),
               max((e for e in energy if e is not None), default=0.0))
