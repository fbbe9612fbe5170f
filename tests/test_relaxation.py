"""The one-device relaxations (``zbsolve.solver.relaxation``) and the solver's phase that uses
them: the bound never exceeds a proven optimum, it proves what the analytic bound cannot, and
the solve that runs the phase keeps every promise of the plain one."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import UNREDUCED, optimum, tiny_multichunk
from test_stretch import unit_v

from zbsolve.cli import main
from zbsolve.instance import load_instance
from zbsolve.solver import api, relaxation
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.cpsat import BOUND_SEARCH_PARAMS, SHAVE_PARAMS, new_solver
from zbsolve.solver.model import TimeScale, build_model
from zbsolve.solver.progress import Progress

# found by a search over random two-device loop instances (m = 3, tight limits): device 0's
# relaxation proves 64, the optimum, where the analytic bound gives 62
RELAX_WINS = {
    "devices": 2, "microbatches": 3, "chunks": 2, "placement": "loop",
    "times": {"F": [4, 2, 3, 1], "I": [4, 3, 4, 2], "W": [1, 1, 1, 2]}, "comm": 0,
    "memory": {"activation": [1.0, 1.0, 2.0, 2.0], "weight": [0.5, 0.5, 1.0, 1.0],
               "limit": [3.0, 4.0]}}

# found by a search over random three-device loop instances (m = 4, limits at or near their
# minimum): every single device's relaxation is proven at 144 at most; devices 1 and 2 kept
# together prove 147, the optimum (analytic bound 134)
PAIR_WINS = {
    "devices": 3, "microbatches": 4, "chunks": 2, "placement": "loop",
    "times": {"F": [1, 1, 4, 4, 3, 3], "I": [4, 3, 4, 1, 4, 4], "W": [2, 1, 3, 2, 4, 4]},
    "comm": 1, "memory": {"activation": [1.0, 2.0, 1.0, 2.0, 1.0, 2.0],
                          "weight": [0.5, 1.0, 0.5, 0.0, 0.5, 0.0], "limit": [4.0, 4.0, 3.0]}}


def relax_bounds(inst, objective):
    scale = TimeScale.choose(inst)
    runs = [relaxation.relax_device(inst, objective, d, 20, scale=scale, workers=1, seed=0)
            for d in range(inst.devices)]
    return [r.bound / scale.time for r in runs], runs


def test_relaxation_proves_the_optimum_where_the_analytic_bound_does_not():
    inst = load_instance(RELAX_WINS)
    assert analytic_bound(inst) == 62.0
    bounds, runs = relax_bounds(inst, "makespan")
    assert max(bounds) == 64.0 and all(r.proven for r in runs)
    assert optimum(inst, "makespan", **UNREDUCED) == pytest.approx(64.0)
    # the relaxation's order is the device's ops, each once
    top = runs[bounds.index(64.0)]
    assert sorted(top.order) == sorted(relaxation.TaskGraph(inst).device_ops(top.device))


def test_a_pair_of_devices_proves_what_no_single_device_does():
    inst = load_instance(PAIR_WINS)
    assert analytic_bound(inst) == 134.0
    bounds, runs = relax_bounds(inst, "makespan")
    assert max(bounds) == 144.0 and all(r.proven for r in runs)
    scale = TimeScale.choose(inst)
    pair = relaxation.relax_device(inst, "makespan", 1, 20, scale=scale, also=(2,), workers=1,
                                   seed=0)
    assert pair.proven and pair.bound / scale.time == 147.0 and pair.also == (2,)
    assert optimum(inst, "makespan", **UNREDUCED) == pytest.approx(147.0)
    # its order is device 1's ops alone; the overload names the one device left out
    assert sorted(pair.order) == sorted(relaxation.TaskGraph(inst).device_ops(1))
    assert [d for d, _ in pair.overload] == [0]


def test_relaxation_takes_cp_sat_parameters():
    # results/multichunk/relax_probe.py passes the bound search this way (fourteenth pass)
    inst = load_instance(RELAX_WINS)
    scale = TimeScale.choose(inst)
    r = relaxation.relax_device(inst, "makespan", 0, 20, scale=scale, workers=1, seed=0,
                                params=BOUND_SEARCH_PARAMS)
    assert r.proven and r.bound / scale.time == 64.0
    with pytest.raises(AttributeError):
        relaxation.relax_device(inst, "makespan", 0, 20, scale=scale, workers=1, seed=0,
                                params={"no_such_parameter": 1})


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]))
def test_relaxation_bounds_never_exceed_a_proven_optimum(inst, objective):
    best = optimum(inst, objective, **UNREDUCED)
    bounds, _ = relax_bounds(inst, objective)
    assert max(bounds) <= best + 1e-9


def test_candidates_are_the_multi_stage_devices_with_limits_tightest_first():
    inst = load_instance({**RELAX_WINS, "devices": 2})
    assert relaxation.candidates(inst) == [0, 1]  # 3 / 3 (at its minimum) before 4 / 3
    one_stage = load_instance({**RELAX_WINS, "devices": 4, "chunks": 1,
                               "memory": {**RELAX_WINS["memory"], "limit": 8.0}})
    assert relaxation.candidates(one_stage) == []
    no_limit = load_instance({**RELAX_WINS, "memory": {**RELAX_WINS["memory"], "limit": None}})
    assert relaxation.candidates(no_limit) == []  # nothing a device relaxation adds then


def test_the_phase_is_refused_where_its_order_would_not_be_a_sequence():
    assert relaxation.applies(load_instance(RELAX_WINS)) is None
    modes = load_instance({**RELAX_WINS, "recompute": {"R": 1.0, "kept": 0.5}})
    assert "memory modes" in relaxation.applies(modes)
    overlap = load_instance({**RELAX_WINS, "overlap": {"FB": 0.8}})
    assert "overlapped pairs" in relaxation.applies(overlap)


def test_solve_runs_the_relaxation_phase_and_keeps_its_bound(monkeypatch):
    # RELAX_AT = 0 in deterministic mode: no first CP-SAT run, so the phase runs (relaxations,
    # the bottleneck's order, CP-SAT again) on an instance small enough to check
    monkeypatch.setattr(api, "RELAX_AT", 0.0)
    inst = load_instance(RELAX_WINS)
    res = solve(inst, SolveOptions(time_limit=20, deterministic=True, workers=1,
                                   memory_tiebreak=False, relax=True, relax_first=False))
    info = res.schedule.meta["solver"]
    assert [r["phase"] for r in info["cp_runs"]] == ["bottleneck", "exact-again"]
    assert max(r["bound"] for r in info["relaxation"]) == 64.0
    assert {r["round"] for r in info["relaxation"]} == {1}  # both proven in the first round
    assert res.status == "optimal" and res.objective_value == 64.0
    assert res.lower_bound == 64.0 and res.analytic_bound == 62.0
    assert any(p["phase"] == "bottleneck" for p in info["phases"])
    # the bottleneck run's own bound holds only with its order: none is shown above the result's
    assert max(b for _, _, b in res.history) <= res.lower_bound


@pytest.mark.parametrize("data, relax", [
    ({**RELAX_WINS, "devices": 4, "chunks": 1,
      "memory": {**RELAX_WINS["memory"], "limit": 4.0}}, True),  # no multi-stage device
    (RELAX_WINS, False),  # not asked for
])
def test_solve_runs_the_phase_only_when_asked_and_useful(monkeypatch, data, relax):
    monkeypatch.setattr(api, "RELAX_AT", 0.0)
    res = solve(load_instance(data), SolveOptions(time_limit=10, deterministic=True, workers=1,
                                                  memory_tiebreak=False, relax=relax,
                                                  relax_first=False))
    info = res.schedule.meta["solver"]
    assert [r["phase"] for r in info["cp_runs"]] == ["exact"]
    assert "relaxation" not in info and res.status == "optimal"


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]))
def test_the_quick_bound_never_exceeds_a_proven_optimum(inst, objective):
    scale = TimeScale.choose(inst)
    raw, runs = relaxation.quick_bound(inst, objective, 10.0, 2.0, scale=scale, workers=1)
    assert [r.device for r in runs] == relaxation.candidates(inst)
    assert raw / scale.time <= optimum(inst, objective, **UNREDUCED) + 1e-9


def test_the_quick_bound_keeps_to_its_share():
    inst = load_instance(RELAX_WINS)
    scale = TimeScale.choose(inst)
    raw, runs = relaxation.quick_bound(inst, "makespan", 0.0, 1.0, scale=scale, workers=1)
    assert (raw, runs) == (0, [])  # no time: no run, no bound
    raw, runs = relaxation.quick_bound(inst, "makespan", 5.0, 1.0, scale=scale, workers=1,
                                       deterministic=True)
    assert raw / scale.time == 64.0 and all(r.dtime <= 1.0 + 1e-6 for r in runs)


def test_the_quick_bound_stops_once_its_bound_proves_the_callers_schedule():
    inst = load_instance(RELAX_WINS)
    scale = TimeScale.choose(inst)
    assert relaxation.quick_bound(inst, "makespan", 5.0, 1.0, scale=scale, workers=1,
                                  done=lambda raw: True) == (0, [])
    # device 0 (first of the candidates) proves 64: device 1 is not run
    raw, runs = relaxation.quick_bound(inst, "makespan", 5.0, 1.0, scale=scale, workers=1,
                                       done=lambda raw: raw >= 64 * scale.time)
    assert raw / scale.time == 64.0 and [r.device for r in runs] == [0]


@pytest.mark.parametrize("deterministic", [False, True])
def test_the_quick_bound_shaves_what_it_did_not_prove(deterministic):
    # a slice too short to prove much: the relaxations not proven run again, in the same
    # order, with the shaving search, and never in deterministic mode (it has no such worker)
    inst = load_instance(PAIR_WINS)
    scale = TimeScale.choose(inst)
    raw, runs = relaxation.quick_bound(inst, "makespan", 30.0, 0.002, scale=scale, workers=1,
                                       deterministic=deterministic, shave=True)
    first = [r for r in runs if not r.shaved]
    assert [r.device for r in first] == relaxation.candidates(inst)
    again = [] if deterministic else [r.device for r in first if not r.proven]
    assert [r.device for r in runs if r.shaved] == again
    assert raw == max(r.bound for r in runs) and raw / scale.time <= 147.0  # the optimum


@pytest.mark.parametrize("deterministic", [False, True])
def test_the_quick_bound_gives_the_rest_of_its_share_to_the_longest_open_relaxation(
        monkeypatch, deterministic):
    # scripted relaxations, none proven: (own bound, best relaxed schedule) per device and
    # search. The longest relaxed schedule is device 2's (130), or without one a bound, so what
    # is left of the share goes to device 2, in one run with the default search
    script = {(0, False): (100, 105), (1, False): (90, None), (2, False): (80, 120),
              (0, True): (104, 105), (1, True): (110, None), (2, True): (80, 130)}
    proven: set[int] = set()
    calls = []

    def fake(inst, objective, device, seconds, *, lower_bound=0, params=None, **kw):
        shaved = "subsolvers" in (params or {})
        calls.append((device, shaved, seconds))
        bound, value = script[device, shaved]
        return relaxation.Relaxation(device, max(lower_bound, bound), value, device in proven,
                                     (), 0.0, 0.01 * seconds)

    monkeypatch.setattr(relaxation, "relax_device", fake)
    monkeypatch.setattr(relaxation, "candidates", lambda inst: [0, 1, 2])
    inst = load_instance(PAIR_WINS)
    scale = TimeScale.choose(inst)

    def bound(share=5.0, **kw):
        calls.clear()
        return relaxation.quick_bound(inst, "makespan", share, 1.0, scale=scale, shave=True,
                                      deterministic=deterministic, **{"rest": True, **kw})

    raw, runs = bound()
    shaved = [] if deterministic else [(0, True), (1, True), (2, True)]
    assert [(d, s) for d, s, _ in calls] == [(0, False), (1, False), (2, False), *shaved,
                                            (2, False)]
    assert runs[-1].rest and not any(r.rest for r in runs[:-1])
    assert raw == (100 if deterministic else 110)
    assert calls[-1][2] > 4.9  # the rest of the share, not another slice
    script.update({(0, False): (100, 125), (2, False): (80, None), (2, True): (80, None)})
    assert bound()[1][-1].device == 0  # now device 0's 125 is the longest
    script.update({(0, False): (100, None), (0, True): (104, None)})
    # no relaxed schedule left: the highest bound, device 1's shaved 110 (deterministic: all
    # at device 0's 100, the first device wins the tie)
    assert bound()[1][-1].device == (0 if deterministic else 1)
    # no last run: not asked, less than a slice left, or every relaxation proven
    assert not any(r.rest for r in bound(rest=False)[1])
    assert not any(r.rest for r in bound(share=0.5)[1])
    # one relaxation open: no shaving slice, the last run has it all (and without a last run
    # to come, the shaving slice runs as before)
    proven.update({0, 1})
    runs = bound()[1]
    assert [(d, s) for d, s, _ in calls] == [(0, False), (1, False), (2, False), (2, False)]
    assert runs[-1].rest and calls[-1][2] > 4.9
    bound(rest=False)
    assert [(d, s) for d, s, _ in calls] == [(0, False), (1, False), (2, False),
                                            *([] if deterministic else [(2, True)])]
    proven.add(2)
    assert not any(r.rest for r in bound()[1]) and len(calls) == 3


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]))
def test_shaved_relaxation_bounds_never_exceed_a_proven_optimum(inst, objective):
    best = optimum(inst, objective, **UNREDUCED)
    scale = TimeScale.choose(inst)
    for d in range(inst.devices):
        r = relaxation.relax_device(inst, objective, d, 20, scale=scale, workers=1, seed=0,
                                    params=SHAVE_PARAMS)
        assert r.bound / scale.time <= best + 1e-9


def test_overlap_is_the_work_that_runs_under_other_work():
    assert relaxation._overlap([]) == 0
    assert relaxation._overlap([(0, 4), (4, 6)]) == 0  # one after the other
    assert relaxation._overlap([(0, 4), (2, 6), (10, 12)]) == 2  # 10 of work, 8 covered
    assert relaxation._overlap([(0, 10), (1, 2), (3, 4)]) == 2  # nested


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tiny_multichunk().filter(lambda inst: inst.devices == 3),
       st.sampled_from(["makespan", "span"]))
def test_pair_relaxation_bounds_never_exceed_a_proven_optimum(inst, objective):
    best = optimum(inst, objective, **UNREDUCED)
    scale = TimeScale.choose(inst)
    for d, e in ((0, 1), (0, 2), (1, 2)):
        r = relaxation.relax_device(inst, objective, d, 20, scale=scale, also=(e,), workers=1,
                                    seed=0)
        assert r.also == (e,) and r.bound / scale.time <= best + 1e-9
        # the overload is reported for the one device left out
        assert [x for x, _ in r.overload] == ([3 - d - e] if r.value is not None else [])


def test_solve_starts_with_the_relaxations_and_keeps_their_bound():
    # the analytic bound is 62; device 0's relaxation proves 64, the optimum, before the search
    inst = load_instance(RELAX_WINS)
    res = solve(inst, SolveOptions(time_limit=10, deterministic=True, workers=1,
                                   memory_tiebreak=False))
    info = res.schedule.meta["solver"]
    assert max(r["bound"] for r in info["relax_first"]) == 64.0
    assert res.relaxed_bound == 64.0 and res.analytic_bound == 62.0
    assert res.schedule.meta["bounds"]["relaxed"] == 64.0
    assert res.status == "optimal" and res.objective_value == res.lower_bound == 64.0
    assert info["proof_time"] <= res.solve_time


@pytest.mark.parametrize("near, ran", [(1.0, True), (0.0, False)])
def test_solve_keeps_a_pair_only_where_the_incumbent_is_near_the_bound(monkeypatch, near, ran):
    # the relaxations first prove 144 (device 1, the top); with the incumbent "near" it, device
    # 1 kept with device 2 (the one its relaxation overloads most) proves 147, the optimum
    monkeypatch.setattr(api, "PAIR_NEAR", near)
    res = solve(load_instance(PAIR_WINS), SolveOptions(time_limit=20, deterministic=True,
                                                       workers=1, memory_tiebreak=False))
    info = res.schedule.meta["solver"]
    assert max(r["bound"] for r in info["relax_first"]) == 144.0
    assert res.status == "optimal" and res.objective_value == 147.0
    if ran:
        assert info["relax_pair"]["devices"] == [1, 2] and info["relax_pair"]["bound"] == 147.0
        assert res.relaxed_bound == 147.0
    else:
        assert "relax_pair" not in info and res.relaxed_bound == 144.0


@pytest.mark.parametrize("data, options, max_ops", [
    (RELAX_WINS, {"relax_first": False}, 800),  # not asked for
    (RELAX_WINS, {}, 10),  # more ops than RELAX_FIRST_MAX_OPS
    ({**RELAX_WINS, "devices": 4, "chunks": 1,
      "memory": {**RELAX_WINS["memory"], "limit": 4.0}}, {}, 800),  # no multi-stage device
])
def test_solve_starts_with_the_relaxations_only_where_asked_and_useful(monkeypatch, data, options,
                                                                       max_ops):
    monkeypatch.setattr(api, "RELAX_FIRST_MAX_OPS", max_ops)
    res = solve(load_instance(data), SolveOptions(time_limit=10, deterministic=True, workers=1,
                                                  memory_tiebreak=False, **options))
    assert "relax_first" not in res.schedule.meta["solver"] and res.relaxed_bound is None
    assert res.status == "optimal"


def test_solve_cli_reports_the_relaxed_bound_and_can_skip_it(tmp_path, capsys):
    path = tmp_path / "relax-wins.yaml"
    load_instance(RELAX_WINS).dump(path)
    args = ["solve", str(path), "--deterministic", "--time-limit", "10", "--workers", "1",
            "--no-memory-tiebreak"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["analytic_bound"], out["relaxed_bound"], out["lower_bound"]) == (62, 64, 64)
    assert main([*args, "--json", "--no-relax-first"]) == 0
    assert json.loads(capsys.readouterr().out)["relaxed_bound"] is None
    assert main(args) == 0
    assert "(analytic 62, relaxed 64, cp-sat" in capsys.readouterr().out
    out_path = tmp_path / "s.json"
    assert main([*args, "--no-shave", "--no-relax-rest", "--no-bottleneck-first",
                 "-o", str(out_path)]) == 0
    options = json.loads(out_path.read_text())["meta"]["options"]
    assert options["shave"] is False and options["relax_rest"] is False
    assert options["bottleneck_first"] is False


@pytest.mark.parametrize("goal, status, value", [
    (math.inf, "FEASIBLE", 90.0),  # every solution meets it: the first one ends the run
    (None, "OPTIMAL", 89.0),  # no goal: CP-SAT goes on to its own proof
])
def test_a_solution_that_meets_the_goal_ends_the_search(goal, status, value):
    # how a bound proven before the search ends the CP-SAT runs without being in their model
    inst = unit_v(3, 12, 3)
    scale = TimeScale.choose(inst)
    progress = Progress(float(scale.time), "makespan")
    progress.goal = goal
    solver = new_solver(10, workers=1, seed=0, deterministic=True)
    code = solver.solve(build_model(inst, "makespan", scale=scale).model, progress)
    assert (solver.status_name(code), solver.objective_value / scale.time) == (status, value)
    assert progress.reached == (goal is not None)


def test_the_bottleneck_runs_first_where_the_relaxations_lift_the_bound(monkeypatch):
    """Where the relaxations first lift the bound and the incumbent is not at it, a run with
    the top device's relaxed order kept comes before the whole model; its schedule counts, its
    bound (of the restricted model) is never shown or reported."""
    # the serial schedule (72) as the only start: the greedy and hand-made ones reach 64
    monkeypatch.setattr(api, "_greedy", lambda *a, **k: [])
    monkeypatch.setattr(api, "hand_made", lambda *a, **k: [])
    inst = load_instance(RELAX_WINS)
    kw = dict(time_limit=20, deterministic=True, workers=1, memory_tiebreak=False,
              windows=False, stretch=False, state_bound=False)
    res = solve(inst, SolveOptions(**kw))
    info = res.schedule.meta["solver"]
    assert [p["value"] for p in info["phases"]][0] == 72.0
    assert max(r["bound"] for r in info["relax_first"]) == 64.0 > res.analytic_bound
    first = info["bottleneck_first"]
    assert first["relaxed"] == 64.0 and first["gap"] > 0 and first["value"] == 64.0
    assert [r["phase"] for r in info["cp_runs"]] == ["bottleneck-first"]  # it met the bound
    assert "bottleneck's order meets the bound" in info["note"]
    assert res.status == "optimal" and res.objective_value == 64.0 == res.lower_bound
    assert max(b for _, _, b in res.history) <= res.lower_bound
    off = solve(inst, SolveOptions(**kw, bottleneck_first=False))
    assert "bottleneck_first" not in off.schedule.meta["solver"]
    assert [r["phase"] for r in off.schedule.meta["solver"]["cp_runs"]] == ["exact"]
    # no relaxation above the analytic bound: no bottleneck to keep
    monkeypatch.setattr(api, "_relax_first", lambda *a, **k: (None, []))
    assert "bottleneck_first" not in solve(inst, SolveOptions(**kw)).schedule.meta["solver"]
