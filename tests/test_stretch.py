"""Stretching a schedule of fewer microbatches to m (zbsolve/solver/stretch.py, issue 18)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zbsolve.baselines import generate
from zbsolve.graph import TaskGraph
from zbsolve.instance import load_instance
from zbsolve.schedule import split_backward
from zbsolve.simulate import ScheduleError, validate
from zbsolve.solver import SolveOptions, relaxation, solve
from zbsolve.solver.bounds import analytic_bound, serial_schedule
from zbsolve.solver.stretch import reduced, reduced_sizes, stretched


def unit_v(p: int, m: int, limit: float):
    """The V-Min rows' setting (unit times, no comm, W holds nothing) at a small p."""
    return load_instance(dict(name=f"unit-v-p{p}-m{m}", devices=p, microbatches=m, chunks=2,
                              placement="v", times=dict(F=1, I=1, W=1), comm=0,
                              memory=dict(activation=1, weight=0, limit=limit)))


def assert_lists_every_op_once_in_microbatch_order(inst, sched) -> None:
    assert sorted(sched.ops()) == sorted(TaskGraph(inst).ops())
    for row in sched.orders:
        last: dict[tuple[str, int], int] = {}
        for op in row:
            assert op.mb > last.get((op.kind, op.stage), -1), (sched.name, op)
            last[(op.kind, op.stage)] = op.mb


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 3), extra=st.integers(0, 5), placement=st.sampled_from(["v", "loop"]),
       f=st.integers(1, 3), i=st.integers(1, 3), w=st.integers(1, 2),
       source=st.sampled_from(["serial", "hand-made"]))
def test_every_stretch_lists_each_op_once_in_microbatch_order(p, extra, placement, f, i, w,
                                                              source):
    inst = load_instance(dict(name="h", devices=p, microbatches=4 * p + extra, chunks=2,
                              placement=placement, times=dict(F=f, I=i, W=w), comm=0.5,
                              memory=dict(activation=1, weight=0.5, limit=None)))
    small_inst = reduced(inst, 2 * p)
    name = "zb-v" if placement == "v" else "1f1b-interleaved"
    small = (serial_schedule(small_inst) if source == "serial"
             else split_backward(generate(name, small_inst)))  # 1F1B-interleaved fuses them
    found = list(stretched(inst, small))
    for cand in found:
        assert_lists_every_op_once_in_microbatch_order(inst, cand)
    if source == "hand-made" and placement == "v" and extra % 2 == 0:
        assert found  # ZB-V repeats one or two microbatches: it has blocks to copy
    assert len({tuple(map(tuple, c.orders)) for c in found}) == len(found)  # no repeats


def test_stretch_reaches_the_optimum_the_exact_model_proves():
    # p = 3 at 3 activations: the analytic bound (79) is far from the optimum, which CP-SAT
    # proves (89, about 9 s); the stretch of the proven 6-microbatch schedule (47) reaches it
    inst = unit_v(3, 12, 3)
    assert analytic_bound(inst, "span") == 79.0
    opts = SolveOptions(time_limit=5, workers=1, seed=0, deterministic=True, objective="span",
                        memory_tiebreak=False)
    small = solve(reduced(inst, 6), opts)
    assert small.status == "optimal" and small.objective_value == 47.0
    values = []
    for cand in stretched(inst, small.schedule):
        try:
            values.append(validate(inst, cand).max_span)
        except ScheduleError:  # a stretch may deadlock or exceed the limit: it is then dropped
            continue
    full = solve(inst, SolveOptions(time_limit=20, workers=1, seed=0, deterministic=True,
                                    objective="span", memory_tiebreak=False, stretch=False))
    assert full.status == "optimal" and full.objective_value == 89.0
    assert min(values) == 89.0


def test_solve_is_proven_by_a_stretched_schedule():
    # no hand-made schedule meets the bound here; the stretch of the proven 6-microbatch
    # schedule (37) does, so CP-SAT never runs on the 18-microbatch model (5 microbatches are
    # not tried: a device may hold 5 in flight, so they leave no steady state)
    inst = unit_v(3, 18, 5)
    assert reduced_sizes(inst) == [6]
    opts = dict(time_limit=10, workers=1, seed=0, deterministic=True, objective="span",
                memory_tiebreak=False)
    res = solve(inst, SolveOptions(**opts))
    solver = res.schedule.meta["solver"]
    assert res.status == "optimal" and res.objective_value == 109.0 == res.analytic_bound
    (run,) = solver["stretch"]
    assert run["microbatches"] == 6 and run["reduced_value"] == 37.0 and run["best"] == 109.0
    assert res.schedule.meta["source"].startswith("hint:stretch-m6-")
    assert solver["note"].startswith("a stretched schedule meets the analytic lower bound")
    assert min(ph["value"] for ph in solver["phases"] if ph["phase"] != "stretch") > 109.0
    assert run["reduced_method"] == "exact"
    assert run["reduced_runs"] == ["exact"]  # deterministic: no bound switch
    # the reduced instance is solved by the exact model whatever the caller's method
    large = solve(inst, SolveOptions(**opts, method="large")).schedule.meta["solver"]
    assert large["method"] == "large" and large["stretch"][0]["reduced_method"] == "exact"
    assert large["stretch"][0]["best"] == 109.0
    quick = dict(opts, time_limit=0.5)
    assert "stretch" not in solve(inst, SolveOptions(**quick, stretch=False)).schedule.meta[
        "solver"]


def test_a_proven_reduced_optimum_short_of_the_bound_is_solved_again_with_other_seeds(
        monkeypatch):
    # the bound (115) is far below the optimum (131): no stretch meets it, so the last m' is
    # solved again with the next seeds (another optimum may repeat better), twice at most
    inst = unit_v(3, 18, 3)
    assert reduced_sizes(inst) == [5, 6] and analytic_bound(inst, "span") == 115.0
    relaxed_m = []  # the instances the relaxations first ran on: the whole one, not a reduced
    keep = relaxation.quick_bound
    monkeypatch.setattr(relaxation, "quick_bound",
                        lambda inst, *a, **k: relaxed_m.append(inst.m) or keep(inst, *a, **k))
    res = solve(inst, SolveOptions(time_limit=10, workers=1, seed=0, deterministic=True,
                                   objective="span", memory_tiebreak=False))
    runs = res.schedule.meta["solver"]["stretch"]
    assert [(r["microbatches"], r["seed"]) for r in runs] == [(5, 0), (6, 0), (6, 1), (6, 2)]
    assert all(r["reduced_status"] == "optimal" and r["best"] == 131.0 for r in runs)
    assert res.status == "optimal" and res.objective_value == 131.0
    assert relaxed_m == [18]


def test_stretch_applies_only_to_plain_multi_stage_instances_with_a_steady_state():
    assert reduced_sizes(unit_v(4, 20, 4)) == [6, 8]
    assert reduced_sizes(unit_v(4, 16, 4)) == [6]  # m >= 2.5 m': copies make up most of it
    assert reduced_sizes(unit_v(4, 14, 4)) == []
    assert reduced_sizes(unit_v(3, 12, 5)) == []  # 216 ops: the exact model needs no help
    assert reduced_sizes(unit_v(4, 20, 6)) == [8]  # 6 in flight: m' = 6 has no steady state
    assert reduced_sizes(unit_v(4, 20, 9)) == []
    assert reduced_sizes(unit_v(4, 20, None)) == []  # no limit: all may be in flight
    one_stage = load_instance(dict(name="one", devices=4, microbatches=64,
                                   times=dict(F=1, I=1, W=1)))
    assert reduced_sizes(one_stage) == []
    assert reduced_sizes(unit_v(16, 64, 12)) == []  # reduced models of 2304 ops and more
