"""The greedy list scheduler with recomputation: a starting point below keep's minimum memory.

Why: with memory modes the hand-made candidates are one-chunk families (1F1B, ZB-H1 with
recompute); for a V or interleaved placement under a tight limit nothing but the serial
schedule would be left as a hint. The keep greedy (``zbsolve.solver.heuristic``) covers any
placement, so it is run on a *proxy* instance whose memory over-approximates a recomputed
unit's everywhere except while it is re-materialized, and an R is written right before every
backward of the resulting orders.

Why the proxy is safe. A recomputed unit of stage s holds ``kept`` from F's end to R's start,
its whole activation from R's start to I's end (and during F), and the weight share from I's
end to W's end (``TaskGraph.lifetimes``). The proxy gives stage s the activation
``a' = max(kept, weight)`` (held F to I in keep form) and the same weight share (I to W), so it
holds at least as much as the real unit at every instant outside F and outside R..I. Those
windows run on the device's compute stream, and R is written right before its I, so the device
does nothing else until that I ends: at most one unit per device is re-materialized at a time,
and it needs ``activation - a'`` on top. The proxy's limit keeps that much free (the largest
over the device's stages). So the greedy's orders, with R inserted, fit the real limit; the
simulator judges the result anyway, and fewer recomputed microbatches (evenly spread, as
the recompute-to-fit baselines choose them) are searched by bisection, keeping the fewest
that the simulator finds fitting.
"""

from __future__ import annotations

from zbsolve.baselines.memory_modes import spread, with_recompute
from zbsolve.instance import Instance, InstanceError
from zbsolve.modes import Mode
from zbsolve.schedule import Schedule
from zbsolve.simulate import SimResult, simulate


def recompute_proxy(inst: Instance) -> Instance | None:
    """The keep-form instance the greedy runs on (module docstring), or None where it does
    not apply: no recompute offered, two replicas, sequence segments, or a limit with no
    room for one re-materialized unit."""
    if inst.recompute is None or inst.replicas != 1 or inst.segments != 1:
        return None
    S = inst.model_stages
    act = [max(inst.kept(s, Mode.RECOMPUTE), inst.weight[s]) for s in range(S)]
    limit: list[float | None] = []
    for d in range(inst.devices):
        lim = inst.limit[d]
        room = max((inst.activation[s] - act[s] for s in inst.stages_of(d)), default=0.0)
        if lim is not None and lim - room <= 0:
            return None
        limit.append(None if lim is None else lim - room)
    try:
        return inst.with_modes(("keep",)).with_(activation=act, limit=limit)
    except InstanceError:
        return None


def recompute_fewest(inst: Instance, orders: Schedule) -> tuple[Schedule, SimResult] | None:
    """``orders`` with R before the backward of the fewest evenly spread microbatches (on
    every stage) that fit the limit; None if even recomputing all of them does not."""
    def attempt(k: int) -> tuple[Schedule, SimResult]:
        units = [(s, j, 0) for s in range(inst.stages) for j in spread(k, inst.microbatches)]
        sched = with_recompute(orders, units, "greedy-recompute")
        return sched, simulate(inst, sched)

    best = attempt(inst.microbatches)
    if not best[1].feasible:
        return None
    lo, hi = 0, inst.microbatches  # hi fits; memory falls with k, but not strictly: each
    while lo < hi:                  # candidate is judged by the simulator, never assumed
        k = (lo + hi) // 2
        tried = attempt(k)
        if tried[1].feasible:
            best, hi = tried, k
        else:
            lo = k + 1
    return best
