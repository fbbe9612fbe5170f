"""A span bound that branches on the memory state at one forward (issue 18, the V drain;
a prototype, not in the solver yet: docs/solver.md, "Branching on a forward's memory state").

Why. Without the memory cumulative (the memory edges kept) the exact model's optimum of ZB-V's
6.2B times at p = 2, m = 4 is the analytic bound, 310.98, by deferring W's; with it, 318.93.
What the bound misses is memory held across kinds and stages at once: at the start of the
tip's last forward its device must have freed enough, and whether it freed it by running
its W's early or by taking its backwards late is a choice no longest path sees.

The argument. Fix X = F(t, n) on device e and assume microbatch order per (kind, stage) (some
optimal schedule has it, ``bounds``' module docstring). At X's start, for each freeing class c
= (I or W, stage s <= t of e), the ops of microbatches < a_c have ended and those of a_c .. n-1
have not: a threshold vector (a_c) with a_W <= a_I per stage and a_I(lower stage) <=
a_I(higher stage). The device then holds X's microbatch's activations of its stages <= t
(their forwards precede X) plus, per earlier microbatch and stage <= t, the activation while
its I is pending, else the W part while its W is, and that must fit the limit (the
simulator's test). So every schedule's state is one of the *feasible* vectors, and under a
vector:
- the last done op of each class ends before X starts (edge op(c, a_c - 1) -> X);
- the first op not done starts after X ends (edge X -> op(c, a_c)): it is on X's device and
  had not ended when X started, so it had not started either;
- X cannot start before its ancestors on e have run: their preemptive one-machine end
  (Jackson), and, since before the earliest I on e only forwards run and at most
  floor(room / least activation) of them fit, h_I + work - min(cap, h_I - h_F) when the
  ancestors' work is above that;
then the per-device head-body-tail bound on the graph with these edges (own-device tails).
The minimum over the feasible vectors is a lower bound on the optimal span.

    python results/multichunk/state_branch.py zbv 4 16     # ZB-V's 6.2B times, limit 2p
    python results/multichunk/state_branch.py check 1 40   # random V instances vs solve
    python results/multichunk/state_branch.py check 4 20 4 # the same with p = 4

``zbv P M`` prints the bound with X on the tip's upper stage (stage p) for microbatch m - 1,
next to the analytic bound and the published ZB-V; ``check SEED COUNT [P,...]`` compares it
with ``solve``'s value (30 s, span) on random small V instances (p = 2 or 3 unless P names
others) and flags any bound above it.
Only plain V instances (``Instance.plain``: one replica, one segment, no pairs, no memory
modes, no step jobs); others are refused.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import time
from collections import deque

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, load_instance, placement_for
from zbsolve.numeric import REL_TOL
from zbsolve.ops import Op
from zbsolve.solver import bounds


def feasible_states(inst: Instance, e: int, t: int, n: int) -> list[dict[tuple[str, int], int]]:
    """Every threshold vector whose memory at F(t, n)'s start fits device e's limit."""
    stages = sorted(s for s in inst.stages_of(e) if s <= t)
    act, wgt = inst.segment_table("activation"), inst.segment_table("weight")
    room = inst.limit[e] / (1 - REL_TOL) - inst.resident(e)
    classes = [("I", s) for s in stages] + [("W", s) for s in stages]
    out = []
    for values in itertools.product(range(n + 1), repeat=len(classes)):
        a = dict(zip(classes, values))
        if any(a[("W", s)] > a[("I", s)] for s in stages):
            continue
        if any(a[("I", lo)] > a[("I", hi)] for lo in stages for hi in stages if lo < hi):
            continue
        held = sum(act[s][0] for s in stages)
        for k in range(n):
            for s in stages:
                held += (act[s][0] if k >= a[("I", s)]
                         else wgt[s][0] if k >= a[("W", s)] else 0.0)
        if held <= room:
            out.append(a)
    return out


def _toposort(ops: list[Op], preds: dict[Op, list[tuple[Op, float]]]) -> list[Op] | None:
    succ: dict[Op, list[Op]] = {o: [] for o in ops}
    indeg = dict.fromkeys(ops, 0)
    for o in ops:
        for q, _ in preds[o]:
            succ[q].append(o)
            indeg[o] += 1
    queue, out = deque(o for o in ops if indeg[o] == 0), []
    while queue:
        o = queue.popleft()
        out.append(o)
        for s in succ[o]:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.append(s)
    return out if len(out) == len(ops) else None  # a cycle: no schedule has this state


def _state_value(inst: Instance, graph: TaskGraph, base_head: dict[Op, float], x: Op, e: int,
                 a: dict[tuple[str, int], int]) -> float | None:
    """The span bound under one state (None: the state's edges close a cycle)."""
    caps = bounds.memory_precedences(inst)
    order = graph.topological()
    preds = {op: list(bounds._preds(graph, op, True, caps)) for op in order}
    for (kind, s), k in a.items():
        if k > 0:
            q = Op(kind, s, k - 1)
            preds[x].append((q, graph.min_duration(q)))
        if k < x.mb:
            preds[Op(kind, s, k)].append((x, graph.min_duration(x)))
    topo = _toposort(order, preds)
    if topo is None:
        return None
    act = inst.segment_table("activation")
    # the most forwards that fit: all of the smallest activation (nothing frees before an I)
    fits = int((inst.limit[e] / (1 - REL_TOL) - inst.resident(e)) // min(
        act[s][0] for s in inst.stages_of(e)))
    h_i = min(base_head[q] for q in graph.device_ops(e) if q.kind == "I")
    head: dict[Op, float] = {}
    for op in topo:
        head[op] = max((head[q] + w for q, w in preds[op]), default=0.0)
        if op == x:
            anc, stack = set(), [x]
            while stack:
                for q, _ in preds[stack.pop()]:
                    if q not in anc:
                        anc.add(q)
                        stack.append(q)
            mine = [q for q in anc if graph.device(q) == e]
            head[x] = max(head[x], bounds._one_machine_bound(
                [(head[q], graph.min_duration(q), 0.0) for q in mine]))
            forwards = sorted(graph.min_duration(q) for q in mine if q.kind == "F")
            work = sum(graph.min_duration(q) for q in mine)
            h_f = min((head[q] for q in mine if q.kind == "F"), default=h_i)
            pre = min(sum(forwards[-fits:]) if fits > 0 else 0.0, max(h_i - h_f, 0.0))
            if work > pre:  # at least work - pre of them runs after h_I
                head[x] = max(head[x], h_i + work - pre)
    # bounds.all_device_tails walks graph.topological(), in which the edges out of X point
    # backwards (to earlier microbatches), so the tails are walked here on ``topo``
    succ: dict[Op, list[tuple[Op, float]]] = {o: [] for o in topo}
    for o in topo:
        for q, w in preds[o]:
            succ[q].append((o, w))
    best = -math.inf
    for d, h0 in enumerate(graph.device_heads()):
        tail: dict[Op, float] = {}
        for o in reversed(topo):  # end of o -> end of an op of d (start-to-start weights)
            t = 0.0 if graph.device(o) == d else -math.inf
            for s, w in succ[o]:
                t = max(t, tail[s] + w - graph.min_duration(o) + graph.min_duration(s))
            tail[o] = t
        jobs = [(head[o], graph.min_duration(o), max(tail[o], 0.0)) for o in graph.device_ops(d)]
        best = max(best, bounds._one_machine_bound(jobs) - h0)
    return best


def state_bound(inst: Instance, e: int, t: int, n: int) -> tuple[float, int]:
    """min over the feasible states at F(t, n) on device e; and how many states."""
    graph = TaskGraph(inst)
    base_head = bounds.heads_tails(inst).head
    x = Op("F", t, n)
    values = [v for a in feasible_states(inst, e, t, n)
              if (v := _state_value(inst, graph, base_head, x, e, a)) is not None]
    return min(values), len(values)


def tip_bound(inst: Instance) -> tuple[float, int]:
    """The state bound at the V's tip: device p - 1's upper stage p, the last microbatch."""
    if not (inst.plain and inst.chunks == 2
            and inst.placement == placement_for("v", inst.devices, 2)):
        raise ValueError(f"{inst.name}: the state bound is written for plain V instances only")
    p = inst.devices
    return state_bound(inst, p - 1, p, inst.microbatches - 1)


def _zbv(p: int, m: int) -> None:
    sys.path.insert(0, "results/multichunk")
    from zbv_idle import six_b_times

    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate

    inst = six_b_times(p, m)
    zbv = simulate(inst, generate("zb-v", inst)).max_span
    t0 = time.monotonic()
    value, states = tip_bound(inst)
    print(f"p = {p}, m = {m}: ZB-V {zbv:.2f}, analytic bound "
          f"{bounds.analytic_bound(inst, 'span'):.2f}, state bound {value:.2f} "
          f"({states} states, {time.monotonic() - t0:.1f} s)")


def _check(seed: int, count: int, devices: list[int]) -> None:
    from zbsolve.solver import SolveOptions, solve

    rng, above = random.Random(seed), 0
    for i in range(count):
        p, m = rng.choice(devices), rng.choice([3, 4, 5])
        f, b, w = (rng.randint(1, 5) for _ in range(3))
        comm, kept = rng.choice([0, 1, 2]), rng.choice([0.25, 0.5, 0.75])
        limit = rng.choice([2 * p, 2 * p + 1, 2 * p + 2])
        inst = load_instance({
            "name": f"v{i}", "devices": p, "microbatches": m, "chunks": 2, "placement": "v",
            "times": {"F": f, "I": b, "W": w}, "comm": comm,
            "memory": {"activation": 1, "weight": kept, "limit": limit}})
        value, _ = tip_bound(inst)
        res = solve(inst, SolveOptions(time_limit=30, objective="span", workers=2, seed=0))
        flag = ""
        if value > res.objective_value + 1e-6:
            above += 1
            flag = "  <- ABOVE a schedule's span: the bound is wrong"
        print(f"{i}: p={p} m={m} F,I,W={f},{b},{w} comm={comm} weight={kept} limit={limit}: "
              f"analytic {bounds.analytic_bound(inst, 'span'):.2f}, state bound {value:.2f}, "
              f"solve {res.status} {res.objective_value:.2f} / {res.lower_bound:.2f}{flag}",
              flush=True)
    print(f"{count} instances, {above} with the bound above a schedule")


def main(args: list[str]) -> None:
    usage = "usage: state_branch.py zbv P M | state_branch.py check SEED COUNT [P,...]"
    try:
        numbers = [int(x) for x in args[1:3]]
        devices = [int(x) for x in args[3].split(",")] if len(args) == 4 else [2, 3]
    except ValueError:
        sys.exit(usage + " (whole numbers)")
    if args[:1] == ["zbv"] and len(args) == 3 and min(numbers) >= 1:
        _zbv(*numbers)
    elif args[:1] == ["check"] and len(args) in (3, 4) and numbers[1] >= 1 and min(devices) >= 1:
        _check(numbers[0], numbers[1], devices)
    else:
        sys.exit(usage + " (P, M, COUNT and each P at least 1)")


if __name__ == "__main__":
    main(sys.argv[1:])
