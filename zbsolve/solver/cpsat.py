"""One place that sets CP-SAT's parameters, for the exact model, the memory phase and LNS windows.

Measured choices (docs/solver.md, "CP-SAT parameters"): ``num_workers`` and ``random_seed`` from
the options; in deterministic mode the limit is ``max_deterministic_time`` and the workers are
interleaved (``interleave_search``), which makes the search independent of thread timing, so the
same model, seed and limit give the same answer on any machine. ``SolveOptions.cp_params``
passes any other parameter through (a list value extends a repeated field, e.g. subsolvers).
"""

from __future__ import annotations

from typing import Any

from ortools.sat.python import cp_model

MIN_SECONDS = 1e-3
# For the exact model (one model of every op; api.py's phases): measured on the random
# multi-chunk family (docs/solver.md, "CP-SAT parameters"). CP-SAT's transitive closure of the
# precedences took ~7 s of a loaded 2-core machine per worker load of a 768-op model (and again
# inside every LNS neighbourhood), before any search; without it the search starts at once.
EXACT_MODEL_PARAMS: dict[str, Any] = {"transitive_precedences_work_limit": 0}
# ``solve --bound-search``: CP-SAT's full-problem workers run its tree search on the objective's
# lower bound instead of ``default_lp`` and the rest of its portfolio (with 2 workers the one
# full-problem worker, the other stays LNS; with 4, three of them: CP-SAT's log). Measured
# (docs/solver.md, "Bound search"): it proves ZB-V's 6.2B times optimal at p = 2, m = 6 in 1 s
# and p = 4, m = 8 in 33 s, where the default's bound stays at the analytic one for minutes;
# it moves no bound at p = 4, m = 16 and searches worse on the random family's open cases, so
# from the start it is asked for; by default it takes over a run whose bound is stuck (the bound
# switch, api._switches).
BOUND_SEARCH_PARAMS: dict[str, Any] = {"subsolvers": ["lb_tree_search"]}
# A one-device relaxation that the default search has not proven: its full-problem worker
# shaves the objective (``objective_lb_search``: proves each value below the bound infeasible)
# instead. In 1 s it lifts relaxations the default leaves at the analytic bound (random-25's
# device 0: 486 -> 494; random-tight-26's device 1: 716 -> 784), but proves fewer of the easy
# ones, so it runs second (``relaxation.quick_bound``'s ``shave``; docs/solver.md, "One-device
# relaxations first"). Interleaved (deterministic) search leaves it out: wall clock only.
SHAVE_PARAMS: dict[str, Any] = {"subsolvers": ["objective_lb_search"]}


def new_solver(seconds: float, *, workers: int, seed: int, deterministic: bool = False,
               gap: float = 0.0, extra: dict[str, Any] | None = None) -> cp_model.CpSolver:
    """A CpSolver limited to ``seconds`` (wall, or deterministic seconds when
    ``deterministic``)."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = workers
    prm.random_seed = seed
    prm.relative_gap_limit = gap
    if deterministic:
        prm.max_deterministic_time = max(seconds, MIN_SECONDS)
        prm.interleave_search = True
    else:
        prm.max_time_in_seconds = max(seconds, MIN_SECONDS)
    for key, value in (extra or {}).items():
        if isinstance(value, list):
            getattr(prm, key).extend(value)
        else:
            setattr(prm, key, value)
    return solver


def run(solver: cp_model.CpSolver, model: cp_model.CpModel, callback=None) -> int:
    """``solver.solve(model)``, past a crash of OR-Tools 9.15's presolve on some hints.

    With a solution hint, presolve may raise ``IndexError: absl::btree_map::at`` (C++'s
    ``std::out_of_range`` from ``SolutionCrush``; google/or-tools#5288, open), even for a
    complete hint that is a feasible solution: it happened to a 3-device, two-replica model
    with step jobs (``tests/data/ortools-5288-model.pb.txt.gz``). Then the run is made again
    without the hint. The hint's schedule is not lost: every caller keeps its own incumbent.
    """
    def once() -> int:
        return solver.solve(model, callback) if callback is not None else solver.solve(model)

    try:
        return once()
    except IndexError:
        if not len(model.proto.solution_hint.vars):
            raise
    model.clear_hints()
    return once()
