"""Branch and bound over device orders: an exact optimum for tiny instances that owes nothing
to the CP-SAT model (issue 18: bounds are tested against a known optimum, "brute force or
proven CP-SAT").

Why a second exact method: every other optimum in the tests is CP-SAT's, on our own model. A
model that is stricter than the simulator (a constraint too many) would prove a value that no
bound test could catch, since the bounds are compared with that same model; one that is looser
would prove values below what any schedule reaches. This search reads only the task graph
(``zbsolve.graph``: jobs, dependencies, delays, memory lifetimes) and times orders the way the
simulator does, so an optimum both agree on is an optimum of the instance.

What is searched. A schedule is one order per device; the simulator runs every op as soon as
its device is free and its inputs have arrived. The search builds the orders together: it
takes a device with no op waiting, and branches over the op it runs next (an op none of whose
ancestors on the same device is still unlisted, whose start keeps the device's memory within
its limit; with ``symmetry``, only the next microbatch of each (kind, stage, segment), which
the CP-SAT model assumes too). An op waits until its inputs are timed; a node where every
unfinished device waits and nothing can be timed is a deadlock and is dropped. Each set of
orders is reached once.

Pruning, each valid for every completion of the node:
- the objective's lower bound: per device, its remaining ops in order of their earliest
  start (the inputs' earliest ends plus delays, the device's own free time) finish no sooner
  than that one-machine schedule (optimal for one machine with release times); a span
  subtracts the device's head (``TaskGraph.device_heads``, where the simulator measures it
  from), a makespan adds, per op, its longest path to the end of the graph;
- an op that would start after a gap its device could fill with an I or a W (an op that
  allocates nothing) that ends no later is not branched on: moving that I or W into the gap
  delays nothing and frees memory earlier, so the order with it first is as good: no start
  is later, and neither objective can grow (both only grow with the ends).

Refused (``ValueError``): memory modes, replicas, fused or paired backwards, the step
boundary, jobs no device runs (a copy stream or an implicit job would need the simulator's
other rules), and instances above ``MAX_OPS`` ops. The search is exponential: ``max_nodes``
stops it (``proven`` False then).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zbsolve.graph import END, START, TaskGraph
from zbsolve.instance import Instance
from zbsolve.numeric import exceeds
from zbsolve.ops import Kind
from zbsolve.schedule import Schedule

OBJECTIVES = ("makespan", "span")
MAX_OPS = 400  # the search is for tiny instances (and recurses once per op listed)
TOL = 1e-9  # relative: a schedule must beat the incumbent by more than this to replace it


@dataclass(frozen=True)
class Exhaustive:
    """The best schedule found (None: none beat ``upper``), its value, whether the search
    finished (so nothing beats ``value``, or ``upper`` when ``schedule`` is None), and the
    nodes it visited."""

    schedule: Schedule | None
    value: float
    proven: bool
    nodes: int


class _Problem:
    """The instance as arrays: ops 0..n-1, their device, duration, inputs with delays,
    memory allocated at start / freed at end, same-device ancestors, class, tails and the
    devices' heads."""

    def __init__(self, inst: Instance, symmetry: bool):
        graph = TaskGraph(inst)
        reason = refusal(inst, graph)
        if reason:
            raise ValueError(f"exhaustive search: {reason}")
        ops = graph.topological(implicit=False)
        self.ops = ops
        index = {op: i for i, op in enumerate(ops)}
        self.n = n = len(ops)
        self.p = inst.devices
        self.dev = [graph.device(op) for op in ops]
        self.dur = [graph.duration(op) for op in ops]
        self.preds = [[(index[q], c) for q, c in graph.preds(op)] for op in ops]
        succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for i in range(n):
            for q, c in self.preds[i]:
                succs[q].append((i, c))
        self.alloc = [0.0] * n
        self.free = [0.0] * n
        for d in range(self.p):
            for lt in graph.device_lifetimes(d):
                if lt.born_at != START or lt.dies_at != END:
                    raise ValueError("exhaustive search: a lifetime not from a start to an end")
                self.alloc[index[lt.born]] += lt.amount
                self.free[index[lt.dies]] += lt.amount
        self.resident = [inst.resident(d) for d in range(self.p)]
        self.limit = list(inst.limit)
        # ancestors as bit sets (ops are in topological order), kept where on the same device
        anc = [0] * n
        for i in range(n):
            for q, _ in self.preds[i]:
                anc[i] |= anc[q] | (1 << q)
        self.same_anc = [sum(1 << q for q in range(n) if anc[i] >> q & 1
                             and self.dev[q] == self.dev[i]) for i in range(n)]
        # classes: (kind, stage, segment) in microbatch order; without symmetry one per op
        self.classes: list[list[list[int]]] = [[] for _ in range(self.p)]
        self.class_of = [0] * n  # op -> its class's index among its device's classes
        groups: dict[tuple, list[int]] = {}
        for i, op in enumerate(ops):
            key = (op.kind, op.stage, op.seg) if symmetry else (i,)
            groups.setdefault(key, []).append(i)
        for members in groups.values():
            members.sort(key=lambda i: ops[i].mb)
            row = self.classes[self.dev[members[0]]]
            for i in members:
                self.class_of[i] = len(row)
            row.append(members)
        # tails: the longest path from an op's end to the end of the graph (the makespan's)
        # and, per op, to the end of an op of its own device (its device's span's)
        self.tail = [0.0] * n
        reach = [[-math.inf] * self.p for _ in range(n)]  # to the end of an op of device k
        for i in reversed(range(n)):
            self.tail[i] = max((c + self.dur[s] + self.tail[s] for s, c in succs[i]),
                               default=0.0)
            for s, c in succs[i]:
                for k in range(self.p):
                    via = max(reach[s][k], 0.0 if self.dev[s] == k else -math.inf)
                    reach[i][k] = max(reach[i][k], c + self.dur[s] + via)
        self.own_tail = [max(0.0, reach[i][self.dev[i]]) for i in range(n)]
        self.head = graph.device_heads()  # where a span is measured from


def refusal(inst: Instance, graph: TaskGraph | None = None) -> str | None:
    """Why the search cannot take ``inst`` (module docstring), or None. ``graph``: the
    instance's task graph, when the caller has built it."""
    graph = TaskGraph(inst) if graph is None else graph
    if graph.count() > MAX_OPS:
        return f"{graph.count()} ops, above the {MAX_OPS} it searches; use solve"
    if graph.open or graph.has_modes:
        return "memory modes (recompute, offload) to choose; solve without them"
    if inst.replicas > 1:
        return "two replicas add the gradient all-reduce; solve one replica"
    if any(True for _ in graph.implicit_ops()) or any(True for _ in graph.tail_ops()):
        return "jobs no device orders (the step boundary); solve without a step"
    if any(op.kind == Kind.B for op in graph.ops()) or graph.overlap:
        return "fused or overlapped backwards; solve with split I and W"
    return None


def solve_exhaustive(inst: Instance, objective: str = "makespan", *, upper: float | None = None,
                     symmetry: bool = True, max_nodes: int = 1_000_000) -> Exhaustive:
    """The best schedule of ``inst`` by branch and bound (module docstring). ``upper``: a value
    known to be reached (a schedule's), so only better ones are searched; ``max_nodes``: the
    node budget. With ``proven``, ``value`` is the optimum (``upper`` where nothing beat it)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    pb = _Problem(inst, symmetry)
    search = _Search(pb, objective, math.inf if upper is None else upper, max_nodes)
    proven = search.run()
    orders = None if search.best_orders is None else [
        [pb.ops[i] for i in row] for row in search.best_orders]
    sched = None if orders is None else Schedule(orders, name=f"exhaustive-{objective}")
    return Exhaustive(sched, search.best, proven, search.nodes)


class _Search:
    """The depth-first search: one node per op listed (module docstring), the incumbent in
    ``best`` / ``best_orders``."""

    def __init__(self, pb: _Problem, objective: str, upper: float, max_nodes: int):
        self.pb = pb
        self.span = objective == "span"
        self.best = upper
        self.best_orders: list[list[int]] | None = None
        self.max_nodes = max_nodes
        self.nodes = 0

    def run(self) -> bool:
        pb = self.pb
        state = _State(
            seq=[[] for _ in range(pb.p)], listed=0, start=[None] * pb.n,
            free_at=[0.0] * pb.p, waiting=[None] * pb.p, mem=list(pb.resident),
            next_in=[[0] * len(c) for c in pb.classes])
        try:
            self._node(state)
        except _OutOfNodes:
            return False
        return True

    def _node(self, s: _State) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _OutOfNodes
        pb = self.pb
        self._time(s)
        if s.listed == (1 << pb.n) - 1:
            if any(t is None for t in s.start):
                return  # a deadlock at the last ops
            value = self._value(s)
            if value < self._cutoff():
                self.best, self.best_orders = value, [list(r) for r in s.seq]
            return
        if self._bound(s) >= self._cutoff():
            return
        open_ = [d for d in range(pb.p) if s.waiting[d] is None and self._left(s, d)]
        if not open_:
            return  # every unfinished device waits on an op that cannot be timed: deadlock
        d = min(open_, key=lambda k: (s.free_at[k], k))
        for i in self._branches(s, d):
            self._node(s.listed_next(pb, d, i))

    def _cutoff(self) -> float:
        """What a schedule must stay below to beat the incumbent."""
        return self.best - TOL * max(1.0, abs(self.best)) if self.best < math.inf else math.inf

    def _left(self, s: _State, d: int) -> bool:
        return any(n < len(c) for n, c in zip(s.next_in[d], self.pb.classes[d]))

    def _ready(self, s: _State, i: int) -> float | None:
        """When op i's inputs have all arrived (None: one is not timed yet)."""
        t = 0.0
        for q, c in self.pb.preds[i]:
            if s.start[q] is None:
                return None
            t = max(t, s.start[q] + self.pb.dur[q] + c)
        return t

    def _branches(self, s: _State, d: int) -> list[int]:
        """Device d's candidate next ops, the dominated ones left out, earliest first."""
        pb = self.pb
        cands = []
        for k, members in enumerate(pb.classes[d]):
            if s.next_in[d][k] == len(members):
                continue
            i = members[s.next_in[d][k]]
            if pb.same_anc[i] & ~s.listed:
                continue
            if pb.alloc[i] and exceeds(s.mem[d] + pb.alloc[i], pb.limit[d]):
                continue
            ready = self._ready(s, i)
            at = None if ready is None else max(s.free_at[d], ready)
            cands.append((i, at))
        kept = [(at if at is not None else math.inf, pb.ops[i].kind != Kind.I, i)
                for i, at in cands if not self._dominated(s, d, i, at, cands)]
        return [i for _, _, i in sorted(kept)]

    def _dominated(self, s: _State, d: int, i: int, at: float | None,
                   cands: list[tuple[int, float | None]]) -> bool:
        """Whether op i, starting at ``at`` after a gap on device d, leaves room for another
        candidate that allocates nothing (an I or a W) to run and end before it."""
        if at is None or at <= s.free_at[d]:
            return False
        dur, alloc = self.pb.dur, self.pb.alloc
        return any(j != i and t is not None and not alloc[j] and t + dur[j] <= at
                   for j, t in cands)

    def _time(self, s: _State) -> None:
        """Time every waiting op whose inputs are timed, until none is left to time."""
        pb = self.pb
        changed = True
        while changed:
            changed = False
            for d in range(pb.p):
                i = s.waiting[d]
                if i is None:
                    continue
                ready = self._ready(s, i)
                if ready is None:
                    continue
                s.start[i] = max(s.free_at[d], ready)
                s.free_at[d] = s.start[i] + pb.dur[i]
                s.waiting[d] = None
                changed = True

    def _value(self, s: _State) -> float:
        pb = self.pb
        ends = [max(s.start[i] + pb.dur[i] for i in row) for row in s.seq]
        if not self.span:
            return max(ends)
        return max(e - h for e, h in zip(ends, pb.head))

    def _earliest(self, s: _State, floors: list[float], keep: list[int | None] = ()
                  ) -> list[float]:
        """Earliest starts: the timed ops' own, the others' from their inputs and their
        device's floor (``keep``: ops held to the first floors, the devices' waiting ops)."""
        pb = self.pb
        est = [0.0] * pb.n
        for i in range(pb.n):  # topological order
            if s.start[i] is not None:
                est[i] = s.start[i]
                continue
            t = s.free_at[pb.dev[i]] if i in keep else floors[pb.dev[i]]
            for q, c in pb.preds[i]:
                t = max(t, est[q] + pb.dur[q] + c)
            est[i] = t
        return est

    def _bound(self, s: _State) -> float:
        pb = self.pb
        est = self._earliest(s, s.free_at)
        # a waiting op runs before every other op its device has left
        floors = [s.free_at[d] if w is None else est[w] + pb.dur[w]
                  for d, w in enumerate(s.waiting)]
        if floors != s.free_at:
            est = self._earliest(s, floors, keep=s.waiting)
        best = 0.0
        tails = pb.own_tail if self.span else pb.tail
        for d in range(pb.p):
            jobs = [(est[i], pb.dur[i], tails[i]) for i in range(pb.n)
                    if pb.dev[i] == d and s.start[i] is None]
            if not jobs:
                end = s.free_at[d]
            else:
                end = max(s.free_at[d], _one_machine(jobs))
            best = max(best, end - pb.head[d] if self.span else end)
        return best


def _one_machine(jobs: list[tuple[float, float, float]]) -> float:
    """A lower bound on max(end + tail) of ``jobs`` = (head, duration, tail) on one machine:
    for the jobs with the k latest heads, and for those with the k longest tails, the least
    head + their durations + the least tail (none of them starts before the least head, they
    run one at a time, and the last to end has at least the least tail after it)."""
    best = 0.0
    for key in (0, 2):
        work, low_head, low_tail = 0.0, math.inf, math.inf
        for head, dur, tail in sorted(jobs, key=lambda j: -j[key]):
            work += dur
            low_head, low_tail = min(low_head, head), min(low_tail, tail)
            best = max(best, low_head + work + low_tail)
    return best


class _OutOfNodes(Exception):
    pass


@dataclass
class _State:
    seq: list[list[int]]  # per device: its order so far
    listed: int  # bit set of the ops in some order
    start: list[float | None]  # per op: its start once timed
    free_at: list[float]  # per device: the end of its last timed op
    waiting: list[int | None]  # per device: its last listed op while not timed
    mem: list[float]  # per device: its memory after its order so far
    next_in: list[list[int]]  # per device and class: how many of the class are listed

    def listed_next(self, pb: _Problem, d: int, i: int) -> _State:
        """A copy with op i listed next on device d."""
        k = pb.class_of[i]
        next_in = [list(row) for row in self.next_in]
        next_in[d][k] += 1
        seq = [list(row) for row in self.seq]
        seq[d].append(i)
        waiting = list(self.waiting)
        waiting[d] = i
        mem = list(self.mem)
        mem[d] += pb.alloc[i] - pb.free[i]
        return _State(seq, self.listed | (1 << i), list(self.start), list(self.free_at),
                      waiting, mem, next_in)
