"""A device's relaxation with the free devices projected out: the same optimum, a model of
the kept devices' ops only.

Why. In a relaxation (``relaxation.py``) every device but the kept ones loses its
one-at-a-time and memory constraints. What is left of those devices' ops is a system of
difference constraints: precedences with their delays, the microbatch-order chains and the
memory precedences (start(b) >= start(a) + w), each device's first start and last end, and
the objective above every last end. CP-SAT keeps all of those variables: on vmin/p16-m32
(3,072 ops) the presolved relaxation of the V's tip still has 2,988 variables for the 192
ops the tip runs, and takes 12 s to prove 239.

The projection. The least start of a free op, given the kept ops' starts, is a longest path
(free ops have nothing else to wait for), so the free ops can be left out once every
constraint they pass on is added between kept ops: start(b) >= start(a) + D(a, b), with D the
longest path from kept a to kept b whose inner ops are all free; start(a) >= head(a); and
objective >= start(a) + tail(a), with tail(a) the longest path from a to any op's end (less
that device's head, for the span) or to a device's first forward plus its work (the model's
redundant ``last >= first + work``). Every schedule of the relaxation satisfies these, and
any start of the kept ops that satisfies them extends to a schedule of the relaxation with
the same objective (every free op at its least start, ``complete``): the two optima are
equal (tests/test_projected.py checks it against the full relaxation on random instances).
On vmin/p16-m32 the tip is proven at 239 in 2.3 s against 9.5 s, random-01's device 0 at 1398
in 1.0 s against 2.9 s (docs/solver.md, "One-device relaxations": "The free devices projected
out").

Where it applies. The same constraints as ``build_model(relaxed=...)`` only where the model
is a plain precedence system outside the kept devices: no overlapped pairs or memory modes
(``relaxation.applies``), no all-reduce or optimizer step (ops no device runs, and per-device
step tails that keep a one-at-a-time constraint on free devices), microbatch order on,
one replica per device (with two, a device's first start is the earlier of two forwards, and
"last >= first + work" is no longer a difference constraint; on Chimera p = 4, m = 8 the
full model was as fast), and at most ``MAX_CELLS`` paths and ``MAX_LINKS`` constraints
between kept ops. Else ``build`` returns None and the caller builds the full model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.solver import bounds
from zbsolve.solver.bounds import analytic_bound, heads_tails, memory_precedences
from zbsolve.solver.model import TimeScale, _add_memory, _leads, scaled_instance, serial_horizon

NEG = -math.inf
# what the projection may hold at once: the longest paths into each op from each kept op (a
# float matrix, 80 MB at most; vmin/p16-m128's tip needs 12,288 x 768) and the constraints
# between kept ops (vmin/p16-m64's tip with device 0: 15,797); above either, the full model
MAX_CELLS, MAX_LINKS = 10_000_000, 1_000_000


@dataclass
class Projected:
    """The kept devices' model: ``start`` of each kept op (model units), ``objective`` its
    variable; ``complete`` gives every op's start from the kept ones'."""

    model: cp_model.CpModel
    graph: TaskGraph  # of the scaled instance
    start: dict[Op, cp_model.IntVar]
    objective: cp_model.IntVar
    ops: list[Op]  # every op, in topological order
    preds: list[list[tuple[int, int]]]  # per op (index into ops): (predecessor, weight)
    head: list[int]

    def duration(self, op: Op) -> int:
        return int(self.graph.duration(op))

    def complete(self, kept: dict[Op, int]) -> dict[Op, int]:
        """Every op's start: the kept ops' as given, each free op at its least start."""
        out: list[int] = []
        for op, ps, h in zip(self.ops, self.preds, self.head):
            out.append(kept[op] if op in kept else
                       max([h, *(out[j] + w for j, w in ps)]))
        return dict(zip(self.ops, out))


def _edges(graph: TaskGraph, si: Instance, ops: list[Op]) -> bounds.Edges:
    """The start-to-start edges (index into ``ops``, weights rounded to model units): the
    precedences with their delays, the microbatch-order chain and the memory precedences, as
    ``bounds`` walks them and ``build_model`` states them with microbatch order on."""
    e = bounds.edges(graph, ops, True, memory_precedences(si))
    preds, succs = ([[(j, int(round(w))) for j, w in ps] for ps in lists]
                    for lists in (e.preds, e.succs))
    return bounds.Edges(e.ops, e.index, preds, succs)


def build(inst: Instance, objective: str, keep: Iterable[int], *, scale: TimeScale,
          symmetry: bool = True, memory_model: str = "cumulative",
          lower_bound: int = 0) -> Projected | None:
    """The relaxation that keeps the devices ``keep`` exact, projected onto their ops (module
    docstring); None where it does not apply."""
    keep = frozenset(keep)
    si = scaled_instance(inst, scale)
    graph = TaskGraph(si)
    leads = [_leads(si, d) for d in range(si.devices)]
    if (not symmetry or graph.overlap or graph.open or graph.has_modes
            or list(graph.implicit_ops()) or list(graph.tail_ops())
            or any(len(first) != 1 for first in leads)):
        return None
    ops = graph.topological(implicit=False)
    n = len(ops)
    dev = [graph.device(op) for op in ops]
    kept = [i for i in range(n) if dev[i] in keep]
    if n * len(kept) > MAX_CELLS:
        return None
    dur = np.array([int(graph.duration(op)) for op in ops], dtype=float)
    edges = _edges(graph, si, ops)
    preds, index = edges.preds, edges.index
    span = objective == "span"
    dev_heads = [int(round(h)) for h in graph.device_heads()]
    # the objective through each op: its end (less its device's head, for a span), and
    # through a device's single first forward, that plus the device's work
    own = dur - (np.array([dev_heads[d] for d in dev], dtype=float) if span else 0.0)
    for d, (lead,) in enumerate(leads):
        i = index[lead]
        own[i] = max(own[i], math.ceil(graph.device_min_work(d) - 1e-9)
                     - (dev_heads[d] if span else 0))
    ht = heads_tails(si, ordered=True, graph=graph)
    head = [int(ht.head[op]) for op in ops]
    tail = own.copy()
    for i in range(n - 1, -1, -1):
        for k, w in edges.succs[i]:
            tail[i] = max(tail[i], w + tail[k])
    # D(a, b) through free ops only: one column per kept op, a kept op passes nothing on
    col = {i: c for c, i in enumerate(kept)}
    reach = np.full((n, len(kept)), NEG)
    links: list[tuple[int, int, int]] = []
    for i in range(n):
        row = np.full(len(kept), NEG)
        for j, w in preds[i]:
            np.maximum(row, reach[j] + w, out=row)
        if i in col:
            links += [(kept[c], i, int(row[c])) for c in np.flatnonzero(row > NEG)]
            if len(links) > MAX_LINKS:
                return None
            row = np.full(len(kept), NEG)
            row[col[i]] = 0.0
        reach[i] = row
    serial = serial_horizon(si, graph)
    model = cp_model.CpModel()
    lb = max(int(math.ceil(analytic_bound(si, objective) - 1e-9)), int(lower_bound))
    obj = model.new_int_var(lb, max(lb, serial), objective)
    # the free ops' own paths, none through a kept op: a constant under the objective
    free = max((head[i] + own[i] for i in range(n) if dev[i] not in keep), default=0.0)
    model.add(obj >= int(math.ceil(free - 1e-9)))
    start: dict[Op, cp_model.IntVar] = {}
    durs: dict[Op, int] = {}
    for i in kept:
        op, d = ops[i], int(dur[i])
        durs[op] = d
        start[op] = model.new_int_var(head[i], max(head[i], serial - d), str(op))
        model.add(obj >= start[op] + int(math.ceil(tail[i] - 1e-9)))
    for a, b, w in links:
        model.add(start[ops[b]] >= start[ops[a]] + w)
    for d in sorted(keep):
        mine = [ops[i] for i in kept if dev[i] == d]
        model.add_no_overlap([model.new_fixed_size_interval_var(start[op], durs[op], f"i{op}")
                              for op in mine])
        _add_memory(model, si, graph, d, start, lambda op: start[op] + durs[op], durs, serial,
                    memory_model)
    model.minimize(obj)
    return Projected(model, graph, start, obj, ops, preds, head)
