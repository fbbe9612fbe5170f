"""``--bound-search``: the exact run's full-problem worker searches the lower bound; and the
bound switch (on by default): a run stuck at the analytic bound and at its hint gives way to it.

The instance is ZB-V's 6.2B times at p = 2, m = 6 (limit 2p): its optimum is the published ZB-V
span, 472.81, and the default search leaves the bound at the analytic 464.86 for minutes
(results/multichunk/README.md, "Eleventh pass"), while the bound search proves it in about a
second. The memory-state bound proves it before any search (tests/test_state_bound.py), so the
solves here run without it. Only the first test solves; the others check the wiring and the
refusals.
"""

from __future__ import annotations

import json

import pytest
from test_stretch import unit_v

from zbsolve.cli import main
from zbsolve.instance import load_instance
from zbsolve.solver import SolveOptions, api, cpsat, solve
from zbsolve.solver.progress import Progress


def _zbv_p2_m6():
    return load_instance({
        "name": "zbv-6.2b-times-p2-m6", "devices": 2, "microbatches": 6, "chunks": 2,
        "placement": "v", "times": {"F": 14.41, "I": 14.38, "W": 9.68}, "comm": 1.61,
        "memory": {"activation": 1, "weight": 0.432, "limit": 4}})


def test_bound_search_proves_what_the_default_search_does_not():
    res = solve(_zbv_p2_m6(), SolveOptions(time_limit=30, workers=2, seed=0, objective="span",
                                           bound_search=True, memory_tiebreak=False,
                                           state_bound=False))
    assert res.status == "optimal"
    assert res.objective_value == pytest.approx(472.81)
    assert res.lower_bound == pytest.approx(472.81)
    assert res.analytic_bound == pytest.approx(464.86)  # so the proof is CP-SAT's
    runs = res.schedule.meta["solver"]["cp_runs"]
    assert [r["bound_search"] for r in runs] == [True]


def _spy(monkeypatch) -> list[list[str]]:
    """The subsolvers of every CpSolver the solve makes, in order."""
    seen: list[list[str]] = []
    keep = cpsat.new_solver

    def spy(*a, **k):
        solver = keep(*a, **k)
        seen.append(list(solver.parameters.subsolvers))
        return solver
    monkeypatch.setattr(cpsat, "new_solver", spy)
    return seen


def test_only_the_exact_run_gets_it(monkeypatch):
    seen = _spy(monkeypatch)
    inst = load_instance({
        "name": "p", "devices": 2, "microbatches": 4, "chunks": 2, "placement": "v",
        "times": {"F": [2, 3, 2, 3], "I": [3, 3, 2, 4], "W": [1, 2, 1, 2]}, "comm": 1,
        "memory": {"activation": 1.0, "weight": 0.5, "limit": 3.0}})
    res = solve(inst, SolveOptions(time_limit=10, workers=1, seed=0, windows=False,
                                   bound_search=True))
    assert res.status == "optimal"
    # the relaxations first (a bound of their own: the default search), the run with the
    # bottleneck's order kept where they lift the bound (a search for schedules), the exact
    # run, then the memory tie-break, which searches schedules as before
    info = res.schedule.meta["solver"]
    first = len(info.get("relax_first", [])) + ("bottleneck_first" in info)
    assert seen == [[]] * first + [["lb_tree_search"], []]


def test_the_stretch_phase_keeps_the_default_search(monkeypatch):
    # the reduced (6-microbatch) solve wants a schedule, not the bound; its stretch usually
    # meets the bound here, and should it not, the exact run that follows is the only one
    # with the bound search (the reduced solve's own runs are not in the solve's cp_runs)
    seen = _spy(monkeypatch)
    res = solve(unit_v(3, 18, 5), SolveOptions(time_limit=20, workers=1, seed=0, objective="span",
                                               memory_tiebreak=False, bound_search=True))
    solver = res.schedule.meta["solver"]
    assert solver["stretch"] and seen
    assert all(s in ([], ["lb_tree_search"]) for s in seen)
    assert seen.count(["lb_tree_search"]) == len(solver.get("cp_runs", []))


def test_deterministic_mode_refuses_it(capsys):
    with pytest.raises(ValueError, match="bound_search"):
        SolveOptions(deterministic=True, bound_search=True).check()
    code = main(["solve", "--bound-search", "--deterministic", "--json",
                 "zbsolve/data/instances/default.yaml"])
    assert code == 2
    assert "drop --deterministic or --bound-search" in capsys.readouterr().out


def test_the_switch_proves_it_by_default():
    # 12 s: the exact run is stopped at a quarter of the limit with its bound at 464.86, and
    # the bound search proves the optimum from the best schedule; without the switch the
    # same solve ends at the analytic bound
    inst = _zbv_p2_m6()
    res = solve(inst, SolveOptions(time_limit=12, workers=2, seed=0, objective="span",
                                   memory_tiebreak=False, state_bound=False))
    assert res.status == "optimal" and res.lower_bound == pytest.approx(472.81)
    runs = res.schedule.meta["solver"]["cp_runs"]
    assert [(r["phase"], r["stopped"], r["bound_search"]) for r in runs] == [
        ("exact", True, False), ("bound-search", False, True)]
    off = solve(inst, SolveOptions(time_limit=12, workers=2, seed=0, objective="span",
                                   memory_tiebreak=False, bound_switch=False, state_bound=False))
    assert off.status == "feasible" and off.lower_bound == pytest.approx(464.86)
    assert [r["phase"] for r in off.schedule.meta["solver"]["cp_runs"]] == ["exact"]


def _progress(floor: float, *history: tuple[float, float, float]) -> Progress:
    progress = Progress(1.0, "span", floor=floor)
    progress.history.extend(history)
    return progress


def test_the_switch_waits_for_a_stuck_bound_and_a_gap():
    assert api._stuck(_progress(100.0, (1.0, 120.0, 100.0)))
    assert not api._stuck(_progress(100.0))  # no CP-SAT solution yet
    assert not api._stuck(_progress(100.0, (1.0, 120.0, 101.0)))  # the bound moved
    assert not api._stuck(_progress(100.0, (1.0, 100.9, 100.0)))  # within 1 %
    assert not api._stuck(_progress(100.0, (1.0, 125.0, 100.0), (2.0, 120.0, 100.0)))  # improving
    assert api._stuck(_progress(100.0, (1.0, 120.0, 100.0), (2.0, 120.0, 100.0)))
    assert api._far(_progress(100.0, (1.0, 120.0, 101.0)))  # the relaxations' test
    # an earlier run's improvements (the bottleneck's order first) are not this run's
    earlier = _progress(100.0, (1.0, 125.0, 100.0), (2.0, 120.0, 100.0), (3.0, 120.0, 100.0))
    assert not api._stuck(earlier)
    earlier.run_start = 2
    assert api._stuck(earlier)
    earlier.run_start = 3  # this run has found nothing yet
    assert not api._stuck(earlier)


def test_the_switch_judges_only_a_run_that_had_time():
    # 60 s: the quarter is at 15 s and a run needs 5 s (SWITCH_LOOK) before it is judged
    assert api._switch_at(2.0, 60.0) == pytest.approx(13.0)
    assert api._switch_at(10.0, 60.0) == pytest.approx(5.0)
    assert api._switch_at(14.4, 60.0) is None  # random-07's run: 0.6 s before the quarter
    assert api._switch_at(16.0, 60.0) is None  # after the quarter


def test_where_the_switch_applies():
    multi = _zbv_p2_m6()
    one = load_instance("zbsolve/data/instances/default.yaml")
    assert api._switches(multi, SolveOptions(), 72)
    assert not api._switches(multi, SolveOptions(), api.SWITCH_MAX_OPS + 1)
    assert not api._switches(multi, SolveOptions(bound_switch=False), 72)
    assert not api._switches(multi, SolveOptions(deterministic=True), 72)
    assert not api._switches(multi, SolveOptions(bound_search=True), 72)  # already on
    assert not api._switches(one, SolveOptions(), 72)  # one stage per device


def test_the_cli_turns_it_off(tmp_path, capsys):
    out = tmp_path / "s.json"
    code = main(["solve", "--no-bound-switch", "--time-limit", "2", "--json", "-o", str(out),
                 "zbsolve/data/instances/default.yaml"])
    assert code == 0
    assert json.loads(out.read_text())["meta"]["options"]["bound_switch"] is False
