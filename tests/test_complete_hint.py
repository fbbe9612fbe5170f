"""A hint of every start completes itself: every variable of the model gets a value, and
that assignment is a feasible solution whose objective is the hinted schedule's."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from zbsolve.baselines import generate
from zbsolve.instance import load_instance
from zbsolve.simulate import simulate
from zbsolve.solver import SolveOptions
from zbsolve.solver.api import _model_hint
from zbsolve.solver.heuristic import heuristic_schedule
from zbsolve.solver.model import TimeScale, build_model, scaled_instance


def _inst(placement, v, limit, comm=1.0):
    return load_instance({
        "name": "h", "devices": 3, "microbatches": 6, "chunks": v, "placement": placement,
        "times": {"F": [2, 3, 2, 3, 2, 3][: 3 * v], "I": [3, 3, 2, 4, 3, 2][: 3 * v],
                  "W": [1, 2, 1, 2, 1, 1][: 3 * v]},
        "comm": comm,
        "memory": {"activation": 1.0, "weight": 0.5, "limit": limit},
    })


CASES = [  # (instance, hand-made schedule or None for the greedy, objective)
    (_inst("v", 2, 4.0), None, "makespan"),
    (_inst("v", 2, 4.0), None, "span"),
    (_inst("v", 2, 6.0), "zb-v", "makespan"),
    (_inst("loop", 2, 5.0, comm=0.0), None, "makespan"),
    (_inst("loop", 1, 3.0), "zb-h1", "makespan"),
]


@pytest.mark.parametrize("inst, name, objective", CASES)
def test_hint_is_complete_and_feasible(inst, name, objective):
    sched = (generate(name, inst) if name else heuristic_schedule(inst, objective)[0])
    assert simulate(inst, sched).feasible
    opts = SolveOptions(objective=objective, workers=1, seed=0)
    scale = TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    hint, pairs, ub, horizon = _model_hint(si, sched, opts)
    sm = build_model(inst, objective, upper_bound=ub, horizon=horizon, scale=scale)
    sm.add_hint(hint, pairs)
    proto = sm.model.proto
    assert set(proto.solution_hint.vars) == set(range(len(proto.variables)))
    # pin every variable to its hinted value: CP-SAT must accept it as it is
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 10
    solver.parameters.fix_variables_to_their_hinted_value = True
    assert solver.solve(sm.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    want = simulate(inst, sched).value(objective)
    assert solver.objective_value / scale.time == pytest.approx(want)


def test_partial_hint_stays_partial():
    inst = _inst("v", 2, 4.0)
    sm = build_model(inst, "makespan")
    first = next(iter(sm.start))
    sm.add_hint({first: int(sm.start[first].proto.domain[0])})
    assert list(sm.model.proto.solution_hint.vars) == [sm.start[first].index]


@pytest.mark.parametrize("objective", ["makespan", "span"])
@pytest.mark.parametrize("step", [None, {"mode": "sync", "optimizer": 1}])
def test_one_device_completes_its_hint_too(objective, step):
    """One device: the makespan and step-end maxima have a single term (a max over a list,
    not over unpacked arguments); the solve, whose memory phase hints completely, proves it."""
    from zbsolve.solver import solve

    fields = {"devices": 1, "microbatches": 3, "times": {"F": 1, "I": 2, "W": 1},
              "memory": {"limit": 2}}
    if step:
        fields["step"] = step
    r = solve(load_instance(fields), SolveOptions(time_limit=5, workers=1, seed=0,
                                                  objective=objective))
    assert r.status == "optimal" and r.objective_value == (13.0 if step else 12.0)
