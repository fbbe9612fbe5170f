"""Overlapped F&B pairs for a schedule that has none: a local search judged by the simulator.

The greedy list scheduler and most hand-made families emit single ops. Where the instance
allows a forward and a backward of another stage (and microbatch) on one device to run as one
overlapped job (``overlap``), merging two neighbours of a device's order into one ``Pair``
shortens the device's busy time by (1 - x) of the pair's work, but the forward's output then
leaves only when the pair ends. Whether a merge helps is decided by simulating it: a merge is
kept when the makespan (then the span, then the sum of device ends) gets smaller. Passes repeat
until none helps or the time is up; the result is never worse than the input.
"""

from __future__ import annotations

import time

from zbsolve.instance import Instance
from zbsolve.ops import Entry, Kind, Op, Pair
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, SimResult, simulate

TOL = 1e-9


def _key(sim: SimResult) -> tuple[float, float, float]:
    return (sim.makespan, sim.max_span, sum(sim.busy))


def _better(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Lexicographically smaller beyond rounding."""
    for x, y in zip(a, b):
        if x < y - TOL:
            return True
        if x > y + TOL:
            return False
    return False


def _merge(a: Entry, b: Entry) -> Pair | None:
    """The pair two neighbours could form (forward first), if they are one F and one I or B."""
    if not (isinstance(a, Op) and isinstance(b, Op)):
        return None
    fwd, bwd = (a, b) if a.kind == Kind.F else (b, a)
    if fwd.kind != Kind.F or bwd.kind not in (Kind.I, Kind.B) or fwd.mb == bwd.mb:
        return None
    return Pair(fwd, bwd)


def pair_up(inst: Instance, sched: Schedule, time_limit: float = 1.0) -> tuple[Schedule, SimResult]:
    """Merge neighbouring F and backward ops into overlapped pairs where the simulator says it
    helps (memory must still fit); returns the best schedule found and its simulation."""
    best_sim = simulate(inst, sched)
    if inst.overlap is None:
        return sched, best_sim
    deadline = time.monotonic() + time_limit
    orders = [list(row) for row in sched.orders]
    best = _key(best_sim)
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for d, row in enumerate(orders):
            k = 0
            while k + 1 < len(row) and time.monotonic() < deadline:
                pair = _merge(row[k], row[k + 1])
                if pair is None or inst.overlap_factor(pair.first.stage, pair.second.stage) is None:
                    k += 1
                    continue
                trial = [list(r) for r in orders]
                trial[d] = row[:k] + [pair] + row[k + 2:]
                try:
                    sim = simulate(inst, Schedule(trial))
                except ScheduleError:
                    k += 1
                    continue
                if sim.feasible and _better(_key(sim), best):
                    orders, row, best, best_sim, improved = trial, trial[d], _key(sim), sim, True
                k += 1
    return Schedule(orders, name=f"{sched.name}+pairs", meta=dict(sched.meta)), best_sim
