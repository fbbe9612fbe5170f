"""The best schedule for a runtime without the I/W split: every backward is one fused B.

Megatron and torch's ``Schedule1F1B``-style runtimes run a microbatch's whole backward as one
op. ``solve --fused-backward`` answers for them by a reduction, so that every solver phase
(bounds, greedy hint, CP-SAT, LNS, pairing) serves unchanged:

* the *fused problem* is the instance with I' = I + W and W' = 0 (segment by segment);
* a fused schedule of the instance is a schedule of the fused problem with each W' right after
  its I': same starts, same memory (I' ends when B ends: the activation less the weight part is
  freed then, and W' frees the rest at that same instant, as B does);
* conversely, a schedule of the fused problem becomes a fused schedule by running B where I'
  runs and dropping W': W' takes no time and nothing but memory waits for it, so no op starts
  later and memory is freed no later.

So both problems have the same optimum: the fused problem's lower bounds are valid for the
fused schedules, and the answer loses nothing by the conversion. Overlapped pairs convert too:
a pair (F, I') runs the unit's whole backward, i.e. (F, B), with the same job time x(F + B).
"""

from __future__ import annotations

import dataclasses

from zbsolve.instance import Instance
from zbsolve.ops import Kind, Pair
from zbsolve.schedule import Entry, Schedule, split_backward
from zbsolve.simulate import validate


def fused_problem(inst: Instance) -> Instance:
    """The instance with I' = I + W and W' = 0 (per stage and per segment)."""
    seg_i, seg_w = inst.segment_table("I"), inst.segment_table("W")
    explicit = bool(inst.seg_I or inst.seg_W)
    return dataclasses.replace(
        inst,
        I=tuple(i + w for i, w in zip(inst.I, inst.W)),
        W=(0.0,) * len(inst.W),
        seg_I=tuple(tuple(a + b for a, b in zip(ri, rw)) for ri, rw in zip(seg_i, seg_w))
        if explicit else (),
        seg_W=tuple((0.0,) * len(row) for row in seg_w) if explicit else (),
    )


def _fused_entry(e: Entry) -> Entry | None:
    if isinstance(e, Pair):
        first, second = (_fused_entry(x) for x in (e.first, e.second))
        return Pair(first, second)
    if e.kind == Kind.W:
        return None
    return e._replace(kind=Kind.B) if e.kind == Kind.I else e


def fuse_every_backward(sched: Schedule) -> Schedule:
    """Each I becomes its unit's B where it stands; each W is dropped (see the module)."""
    rows = [[f for f in map(_fused_entry, row) if f is not None] for row in sched.orders]
    return Schedule(rows, sched.name, None, dict(sched.meta))


def only_fused(sched: Schedule) -> bool:
    """True when no op of ``sched`` is a split I or W (a runtime without the split runs it)."""
    return not any(op.kind in (Kind.I, Kind.W) for op in sched.ops())


def solve_fused(inst: Instance, options=None, hints=()):
    """``zbsolve.solver.solve`` for fused-backward runtimes: solve the fused problem, convert,
    judge the answer on ``inst`` itself; the baseline is the best hand-made schedule that a
    fused runtime can run (1F1B, GPipe, interleaved 1F1B, ...)."""
    from zbsolve.baselines import best_feasible
    from zbsolve.solver.api import SolveOptions, hand_made, solve

    options = options or SolveOptions()
    reduced = fused_problem(inst)
    # a fused hint is a schedule of the fused problem once each B is written as I' then W'
    found = solve(reduced, options, [split_backward(h) for h in hints])
    sched = fuse_every_backward(found.schedule)
    sim = validate(inst, sched)
    value = sim.value(options.objective)
    # the fused problem has the same optimum, so its bound holds; the converted schedule is
    # never later than the fused problem's (so the gap can only shrink)
    lower = min(found.lower_bound, value)
    gap = 0.0 if value <= 0 else max(0.0, (value - lower) / value)
    baselines = [r for r in hand_made(inst) if r.applicable and only_fused(r.schedule)]
    best = best_feasible(inst, options.objective, baselines) if baselines else None
    base_value = best.result.value(options.objective) if best else None
    out = Schedule(sched.orders, name=f"{found.schedule.name}-fused", starts=dict(sim.start))
    out.meta = {**found.schedule.meta, "instance": inst.to_dict(), "objective_value": value,
                "figures": sim.summary(), "fused_backward": True,
                "bounds": {**found.schedule.meta.get("bounds", {}), "lower": lower, "gap": gap},
                "baseline": None if best is None else {
                    "name": best.name, "value": base_value, "figures": best.result.summary()}}
    out.meta["status"] = found.status  # the bound holds and the value can only improve
    return dataclasses.replace(
        found, schedule=out, sim=sim, objective_value=value, lower_bound=lower,
        gap=gap, baseline=best.name if best else None, baseline_value=base_value,
        baselines=baselines)

