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
"""

from __future__ import annotations

from dataclasses import dataclass

from zbsolve.dag import all_ops, deps
from zbsolve.instance import Instance, InstanceError
from zbsolve.ops import Op
from zbsolve.schedule import Schedule

MEMORY_EPS = 1e-9


class InfeasibleMemoryError(InstanceError):
    """A device's memory limit is below what any schedule needs.

    ``min_limit`` holds the smallest feasible limit for every device (not only the failing
    ones) so a caller can fix all of them at once.
    """

    def __init__(self, message: str, min_limit: list[float]):
        super().__init__(message)
        self.min_limit = min_limit


def min_memory_limit(inst: Instance) -> list[float]:
    """Per device: the smallest limit under which some schedule exists (see module docstring)."""
    return [sum(inst.activation[s] for s in inst.stages_of(d)) for d in range(inst.devices)]


def check_memory(inst: Instance) -> list[float]:
    """Raise InfeasibleMemoryError if any device's limit is below ``min_memory_limit``."""
    need = min_memory_limit(inst)
    bad = [
        d for d, (lim, n) in enumerate(zip(inst.limit, need))
        if lim is not None and lim < n - MEMORY_EPS
    ]
    if bad:
        parts = [f"device {d}: limit {inst.limit[d]:g} < {need[d]:g}" for d in bad]
        raise InfeasibleMemoryError(
            "memory.limit: no schedule fits ("
            + "; ".join(parts)
            + "). Every schedule holds one activation of each stage of a device at once; "
            f"set memory.limit to at least {[round(x, 9) for x in need]} (per device)",
            need,
        )
    return need


def serial_schedule(inst: Instance) -> Schedule:
    """One microbatch at a time, I and W right after each other: fits ``min_memory_limit``.

    A last-resort schedule (slow, but it exists whenever any schedule does).
    """
    orders: list[list[Op]] = [[] for _ in range(inst.devices)]
    S = inst.stages
    for j in range(inst.microbatches):
        for s in range(S):
            orders[inst.placement[s]].append(Op("F", s, j))
        for s in reversed(range(S)):
            orders[inst.placement[s]].append(Op("I", s, j))
            orders[inst.placement[s]].append(Op("W", s, j))
    return Schedule(orders, name="serial")


# ---------------------------------------------------------------------- heads and tails
def _chain_order(inst: Instance) -> list[Op]:
    """A topological order of the DAG plus the per-(kind, stage) microbatch chains."""
    S = inst.stages
    order = []
    for j in range(inst.microbatches):
        order += [Op("F", s, j) for s in range(S)]
        for s in reversed(range(S)):
            order += [Op("I", s, j), Op("W", s, j)]
    return order


def _preds(inst: Instance, op: Op, ordered: bool) -> list[tuple[Op, float]]:
    """DAG predecessors (edge weight = pred duration + comm), plus the sorted-chain edge."""
    out = [(q, inst.duration(q.kind, q.stage) + c) for q, c in deps(inst, op)]
    if ordered and op.mb > 0:
        q = Op(op.kind, op.stage, op.mb - 1)
        out.append((q, inst.duration(q.kind, q.stage)))
    return out


@dataclass
class HeadsTails:
    """Per op: head = earliest start, tail = least time from its end to the last op's end."""

    head: dict[Op, float]
    tail: dict[Op, float]
    ordered: bool  # True: assumes microbatch order per (kind, stage) (valid, see docstring)


def heads_tails(inst: Instance, ordered: bool = True, source: Op | None = None) -> HeadsTails:
    """Longest paths through the DAG (plus the microbatch chains when ``ordered``).

    With ``source`` the heads are measured from that op's start (ops not reachable from it get
    head 0): used for the span bound of the device whose first op is ``source``.
    """
    topo = _chain_order(inst)
    head: dict[Op, float] = {}
    reach: dict[Op, bool] = {}
    for op in topo:
        cands = [head[q] + w for q, w in _preds(inst, op, ordered) if reach[q]]
        if source is None or op == source:
            head[op], reach[op] = max(cands, default=0.0), True
        else:
            head[op], reach[op] = max(cands, default=0.0), bool(cands)
    succ: dict[Op, list[tuple[Op, float]]] = {op: [] for op in topo}
    for op in topo:
        for q, w in _preds(inst, op, ordered):
            # tail(q) >= w - dur(q) + dur(op) + tail(op); w - dur(q) is the comm delay
            succ[q].append((op, w - inst.duration(q.kind, q.stage)))
    tail: dict[Op, float] = {}
    for op in reversed(topo):
        tail[op] = max(
            (c + inst.duration(n.kind, n.stage) + tail[n] for n, c in succ[op]), default=0.0
        )
    return HeadsTails(head, tail, ordered)


def _one_machine_bound(jobs: list[tuple[float, float, float]]) -> float:
    """Head-body-tail bound of one machine: max over subsets {head >= t} and {tail >= u} of
    min head + total duration + min tail. ``jobs`` = (head, duration, tail)."""
    best = 0.0
    by_head = sorted(jobs, key=lambda x: -x[0])
    work, min_tail = 0.0, float("inf")
    for h, p, q in by_head:
        work += p
        min_tail = min(min_tail, q)
        best = max(best, h + work + min_tail)
    by_tail = sorted(jobs, key=lambda x: -x[2])
    work, min_head = 0.0, float("inf")
    for h, p, q in by_tail:
        work += p
        min_head = min(min_head, h)
        best = max(best, min_head + work + q)
    return best


def device_makespan_bounds(inst: Instance, ht: HeadsTails | None = None) -> list[float]:
    """Per device, a lower bound on the makespan (head-body-tail on its ops)."""
    ht = ht or heads_tails(inst)
    jobs: list[list[tuple[float, float, float]]] = [[] for _ in range(inst.devices)]
    for op in all_ops(inst):
        jobs[inst.placement[op.stage]].append(
            (ht.head[op], inst.duration(op.kind, op.stage), ht.tail[op])
        )
    return [_one_machine_bound(j) for j in jobs]


def device_span_bounds(inst: Instance) -> list[float]:
    """Per device, a lower bound on its span (first start to last end).

    In microbatch order the first op of device d is F(s0, 0), s0 = its lowest stage (every
    other F of d waits for it through the forward chain); heads are measured from it and the
    head-body-tail bound is taken over d's ops with tails cut to d's own last op (zero tails).
    """
    out = []
    for d in range(inst.devices):
        stages = inst.stages_of(d)
        first = Op("F", min(stages), 0)
        ht = heads_tails(inst, ordered=True, source=first)
        jobs = [
            (ht.head[op], inst.duration(op.kind, op.stage), 0.0)
            for op in all_ops(inst) if inst.placement[op.stage] == d
        ]
        out.append(max(_one_machine_bound(jobs), inst.device_work(d)))
    return out


def memory_end_bounds(inst: Instance) -> list[float | None]:
    """Per one-stage device: a lower bound on the end of its last op that uses its memory.

    Device d runs stage s only; L = how many microbatches can be in flight (F started, I not
    ended), R = the round trip F(s, j) start -> I(s, j) end, T = F + I + W of s.
    - Start: no I can start before h_I = head of I(s, 0); before that only forwards run, and at
      most L of them (F(s, L) waits for I(s, 0) to end): at most X = min(L F, h_I - h_F) work.
    - End: when F(s, m-1) starts, n microbatches are in flight and k wait for W, with
      n A + k w <= limit; at most Y = F + n I + (n + k) W work remains for after, and the chain
      needs R + W after that start.
    Hence end >= h_I + (m T - X - Y) + max(R + W, Y) (valid when m > L, so the two windows
    hold different ops; in microbatch order, which loses nothing: module docstring).
    ``None`` for devices with several stages or where the argument does not apply.
    """
    out: list[float | None] = []
    m = inst.microbatches
    for d in range(inst.devices):
        stages = inst.stages_of(d)
        if len(stages) != 1 or inst.limit[d] is None:
            out.append(None)
            continue
        (s,) = stages
        limit, a, w = inst.limit[d], inst.activation[s], inst.weight[s]
        L = int(limit / a + 1e-9)
        if L >= m:
            out.append(None)
            continue
        ht = heads_tails(inst, ordered=False, source=Op("F", s, 0))
        h_f = heads_tails(inst, ordered=False).head[Op("F", s, 0)]
        F, I, W = inst.F[s], inst.I[s], inst.W[s]
        round_trip = ht.head[Op("I", s, 0)] + I
        h_i = h_f + ht.head[Op("I", s, 0)]
        x = min(L * F, h_i - h_f)
        best_y = 0.0
        for n in range(1, L + 1):
            room = limit - n * a
            k = m - n if w <= 0 else min(m - n, int(room / w + 1e-9))
            best_y = max(best_y, n * I + (n + k) * W)
        y = F + best_y
        T = F + I + W
        out.append(h_i + (m * T - x - y) + max(round_trip + W, y))
    return out


def critical_path(inst: Instance) -> float:
    """Longest chain of one microbatch (unlimited devices, no resource conflicts)."""
    ht = heads_tails(inst, ordered=False)
    return max(ht.head[op] + inst.duration(op.kind, op.stage) + ht.tail[op] for op in ht.head)


def analytic_bound(inst: Instance, objective: str = "makespan") -> float:
    """A lower bound on the optimum without CP-SAT, for ``makespan`` or ``span``."""
    mem = memory_end_bounds(inst)
    if objective == "makespan":
        return max(max(device_makespan_bounds(inst)), critical_path(inst),
                   max((b for b in mem if b is not None), default=0.0))
    if objective == "span":
        # spans start at the device's first forward, pinned to its head (see api.py)
        heads = heads_tails(inst, ordered=False).head
        firsts = [heads[Op("F", min(inst.stages_of(d)), 0)] for d in range(inst.devices)]
        return max(max(device_span_bounds(inst)),
                   max((b - f for b, f in zip(mem, firsts) if b is not None), default=0.0))
    raise ValueError(f"objective: expected 'makespan' or 'span', got {objective!r}")
