"""The task DAG: which op waits for which, and how long a hand-off takes.

``deps`` is the single definition of the pipeline's data dependencies; the simulator, the
networkx graph and the CP-SAT model all read it, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator

import networkx as nx

from zbsolve.instance import Instance
from zbsolve.ops import Op


def deps(inst: Instance, op: Op) -> list[tuple[Op, float]]:
    """Direct predecessors of ``op`` with the delay each hand-off adds.

    F(s) <- F(s-1);  I(S-1) <- F(S-1);  I(s) <- I(s+1);  W(s) <- I(s).
    A fused full backward B(s) waits for what I(s) waits for. The input gradient of stage s+1
    is named I(s+1) whether that stage ran it split or fused (then it leaves when B ends).
    Cross-device F->F and I->I hand-offs pay ``inst.comm``; W never communicates.
    """
    kind, s, mb = op
    if kind == "F":
        return [] if s == 0 else [(Op("F", s - 1, mb), inst.hop(s - 1, s))]
    if kind in ("I", "B"):
        if s == inst.stages - 1:
            return [(Op("F", s, mb), 0.0)]
        return [(Op("I", s + 1, mb), inst.hop(s + 1, s))]
    return [(Op("I", s, mb), 0.0)]


def all_ops(inst: Instance) -> Iterator[Op]:
    for s in range(inst.stages):
        for mb in range(inst.microbatches):
            for kind in ("F", "I", "W"):
                yield Op(kind, s, mb)


def build_dag(inst: Instance) -> nx.DiGraph:
    """Nodes: ops with ``duration`` and ``device``; edges carry ``delay``."""
    graph = nx.DiGraph()
    for op in all_ops(inst):
        graph.add_node(op, duration=inst.duration(op.kind, op.stage), device=inst.placement[op.stage])
    for op in all_ops(inst):
        for pred, delay in deps(inst, op):
            graph.add_edge(pred, op, delay=delay)
    return graph


def earliest_starts(inst: Instance) -> dict[Op, float]:
    """Start times with unlimited devices (longest path from the sources): a lower bound."""
    est: dict[Op, float] = {}
    # Ops of one microbatch form a chain F0..F(S-1), I(S-1)..I0 with W hanging off each I.
    for mb in range(inst.microbatches):
        t = 0.0
        for s in range(inst.stages):
            if s > 0:
                t += inst.hop(s - 1, s)
            est[Op("F", s, mb)] = t
            t += inst.F[s]
        for s in reversed(range(inst.stages)):
            if s < inst.stages - 1:
                t += inst.hop(s + 1, s)
            est[Op("I", s, mb)] = t
            t += inst.I[s]
            est[Op("W", s, mb)] = t
    return est
