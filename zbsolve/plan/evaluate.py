"""The inner evaluator of the split search: one split's instance, solved (a fan-out task).

``solve_split`` builds the split's instance (memory limits after the static bytes), runs
``zbsolve.solver.solve`` on it (which also simulates every hand-made schedule and keeps the
best one as its hint, so the result is never worse than the best hand-made schedule that fits)
and returns a picklable ``SplitResult``. A split whose devices cannot hold one activation per
stage next to their static bytes is an answer (``infeasible``), not an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from zbsolve.layers import GIB
from zbsolve.plan.split_search import Split, SplitProblem


@dataclass
class SplitResult:
    split: Split
    status: str  # optimal | feasible | fallback (solver's) | infeasible (memory)
    step_ms: float  # the simulator's makespan of the best schedule found (inf: none fits)
    lower_bound: float  # proven for this split: max(split bound, solver's bound)
    schedule_name: str | None = None
    figures: dict[str, Any] | None = None  # SimResult.summary() of the chosen schedule
    schedule: dict[str, Any] | None = None  # Schedule.to_dict() (its meta carries the instance)
    static_gib: list[float] = field(default_factory=list)  # per device
    hand_made: list[dict[str, Any]] = field(default_factory=list)
    solve_time: float = 0.0
    note: str = ""

    @property
    def found(self) -> bool:
        return math.isfinite(self.step_ms)

    def peak_gb(self, activation_peak_gib: list[float] | None = None) -> list[float]:
        """Per device: static bytes plus an activation peak (the chosen schedule's by
        default), in 10^9 bytes."""
        peaks = activation_peak_gib
        if peaks is None:
            peaks = self.figures["peak_memory"] if self.figures else []
        return [(s + a) * GIB / 1e9 for s, a in zip(self.static_gib, peaks)]


def _hand_made_rows(baselines: list) -> list[dict[str, Any]]:
    rows = []
    for r in baselines:
        if r.applicable:
            rows.append({"name": r.name, **r.result.summary()})
        else:
            rows.append({"name": r.name, "reason": r.reason})
    return rows


def solve_split(problem: SplitProblem, split: Split, *, time_limit: float = 10.0,
                workers: int = 1, seed: int = 0) -> SplitResult:
    """Solve one split's instance within ``time_limit`` seconds."""
    from zbsolve.solver import InfeasibleMemoryError, SolveOptions, solve

    split = tuple(split)
    inst = problem.instance(split)
    static = list(inst.extra["meta"]["static_gib"])
    bound = problem.bound(split)
    try:
        res = solve(inst, SolveOptions(time_limit=max(time_limit, 0.5), workers=workers,
                                       seed=seed))
    except InfeasibleMemoryError as exc:
        return SplitResult(split, "infeasible", math.inf, math.inf, static_gib=static,
                           note=str(exc).split(" (")[0])
    lower = max(res.lower_bound, bound if math.isfinite(bound) else 0.0)
    return SplitResult(
        split, res.status, res.objective_value, min(lower, res.objective_value),
        schedule_name=res.schedule.meta.get("source"), figures=res.sim.summary(),
        schedule=res.schedule.to_dict(), static_gib=static,
        hand_made=_hand_made_rows(res.baselines), solve_time=res.solve_time)
