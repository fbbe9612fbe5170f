"""The progress lines never claim less than what was proven: the bound only goes up."""

from __future__ import annotations

import io

from zbsolve.solver.progress import Progress


def _bounds(text: str) -> list[float]:
    return [float(line.split("bound ")[1].split()[0]) for line in text.splitlines()]


def test_the_bound_shown_and_kept_never_goes_down():
    out = io.StringIO()
    progress = Progress(2.0, "makespan", echo=True, stream=out, floor=10.0)
    progress.note(30.0, 10.0, "hint: zb-h1")
    progress.history.append((0.0, 30.0, 10.0))  # as the first solution callback would
    progress.on_bound(2 * 20.0)  # CP-SAT's bound, in scaled units: 20
    progress.on_bound(2 * 15.0)  # a weaker bound later (a re-scaled model, a window): still 20
    progress.note(28.0, 12.0, "large: window")  # a window's own bound: still 20
    progress.note(27.0, 26.0, "feasible")
    shown = _bounds(out.getvalue())
    assert shown == [10.0, 20.0, 20.0, 20.0, 26.0]
    kept = [b for _, _, b in progress.history]
    assert kept == sorted(kept) and kept[-1] == 20.0
    assert progress.best_bound == 26.0


def test_a_bound_above_the_value_is_not_shown_as_a_gap():
    out = io.StringIO()
    progress = Progress(1.0, "makespan", echo=True, stream=out)
    progress.note(25.0, 26.0, "optimal")  # a bound of the time-scaled model may exceed it
    assert "bound 25  gap 0.000%" in out.getvalue()


def test_a_run_whose_bound_does_not_hold_shows_its_solutions_and_not_its_bound():
    """A CP-SAT run with device orders kept (the bottleneck run) proves a bound of that
    restricted model only: its lines and the kept history carry the bound from before."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = model.new_int_var(5, 20, "x")
    model.minimize(x)
    out = io.StringIO()
    progress = Progress(1.0, "makespan", echo=True, stream=out, floor=2.0)
    progress.bounds_hold = False
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.best_bound_callback = progress.on_bound
    assert solver.solve(model, progress) == cp_model.OPTIMAL
    assert progress.history and all(b == 2.0 for _, _, b in progress.history)
    assert set(_bounds(out.getvalue())) == {2.0} and progress.best_bound == 2.0
    progress.bounds_hold = True  # the same run where its bound holds: 5 is proven
    assert cp_model.CpSolver().solve(model, progress) == cp_model.OPTIMAL
    assert progress.history[-1][2] == 5.0 and progress.best_bound == 5.0
