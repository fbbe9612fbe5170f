"""The exact model's measured CP-SAT parameters reach the solver, and cp_params override them."""

from __future__ import annotations

from zbsolve.instance import load_instance
from zbsolve.solver import SolveOptions, api, cpsat, solve


def _inst():
    return load_instance({
        "name": "p", "devices": 2, "microbatches": 4, "chunks": 2, "placement": "v",
        "times": {"F": [2, 3, 2, 3], "I": [3, 3, 2, 4], "W": [1, 2, 1, 2]}, "comm": 1,
        "memory": {"activation": 1.0, "weight": 0.5, "limit": 3.0}})


def _seen(monkeypatch, **options):
    """The work limit of every CP-SAT solver the solve makes, and the solve's meta."""
    seen = []
    keep = cpsat.new_solver

    def spy(*a, **k):
        solver = keep(*a, **k)
        seen.append(solver.parameters.transitive_precedences_work_limit)
        return solver
    monkeypatch.setattr(cpsat, "new_solver", spy)
    # windows=False: the window search's small models keep CP-SAT's defaults (large.py)
    res = solve(_inst(), SolveOptions(time_limit=10, workers=1, seed=0, windows=False,
                                      **options))
    assert res.status == "optimal"
    return seen, res.schedule.meta["solver"]


def test_exact_model_gets_the_measured_parameters(monkeypatch):
    assert cpsat.EXACT_MODEL_PARAMS == {"transitive_precedences_work_limit": 0}
    seen, _ = _seen(monkeypatch)
    assert seen and set(seen) == {0}  # the exact phase and the memory phase


def test_cp_params_override_them(monkeypatch):
    seen, _ = _seen(monkeypatch, cp_params={"transitive_precedences_work_limit": 123})
    assert seen and set(seen) == {123}


def test_cp_params_reach_the_relaxation_phase(monkeypatch):
    # RELAX_AT = 0: the phase runs at once (its relaxations, the bottleneck run, CP-SAT again)
    monkeypatch.setattr(api, "RELAX_AT", 0.0)
    seen, info = _seen(monkeypatch, cp_params={"transitive_precedences_work_limit": 123},
                       relax=True, relax_first=False, deterministic=True)
    assert info["relaxation"]  # the phase ran: its relaxations are among those seen
    assert set(seen) == {123}
