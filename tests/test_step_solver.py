"""The step boundary (issue 15) in the optimizers: the CP-SAT builder's step jobs agree with
the simulator, the bounds stay below the optimum, mode none leaves the model untouched, the
LNS window objective stays exact, and optimizing the step moves the last W where it pays.
"""

from __future__ import annotations

import random

import pytest
from conftest import make_instance
from ortools.sat.python import cp_model

from zbsolve.graph import TaskGraph
from zbsolve.ops import Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import simulate
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.heuristic import heuristic_schedule
from zbsolve.solver.model import build_model
from zbsolve.step import with_mode

MODES = ("sync", "post-validation")


def solve_model(inst, objective):
    """The step-aware model alone (no hint), solved to optimality."""
    sm = build_model(inst, objective)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 30
    assert solver.solve(sm.model) == cp_model.OPTIMAL
    return sm, solver


def random_step_instance(seed: int):
    rng = random.Random(seed)
    p, v = rng.choice([(2, 1), (3, 1), (2, 2)])
    S = p * v
    return make_instance(
        p=p, m=rng.choice([3, 4]), v=v, placement=rng.choice(["loop", "v"]) if v == 2 else "loop",
        F=[rng.choice([1, 2]) for _ in range(S)], I=2, W=[rng.choice([1, 2]) for _ in range(S)],
        comm=rng.choice([0.0, 0.5]), activation=1.0, weight=0.5,
        limit=rng.choice([None, 2.0 * v + 1]),
        step={"optimizer": [rng.choice([0, 1, 4]) for _ in range(S)],
              "allreduce": rng.choice([0, 1]), "check": rng.choice([0.5, 2])})


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_model_optimum_is_the_simulators_figure_and_bounds_hold(seed, mode, objective):
    inst = with_mode(random_step_instance(seed), mode)
    sm, solver = solve_model(inst, objective)
    value = solver.objective_value / sm.scale.time
    orders = sm.orders(sm.starts(solver))
    assert all(op.kind != "OPT" for row in orders for op in row)  # placed by the tail rule
    sim = simulate(inst, Schedule(orders))
    assert sim.value(objective) == pytest.approx(value)
    assert analytic_bound(inst, objective) <= value + 1e-9


def test_mode_none_builds_the_same_model():
    plain = make_instance(p=3, m=4, F=1, I=2, W=1, comm=0.5, limit=4)
    with_step = plain.with_(step={"mode": "none", "optimizer": 3, "allreduce": 1, "check": 2})
    for objective in ("makespan", "span"):
        a, b = build_model(plain, objective), build_model(with_step, objective)
        assert str(a.model.Proto()) == str(b.model.Proto())


def test_the_last_w_moves_where_a_slow_optimizer_needs_it():
    """Stage 1's optimizer takes 8 (unit ops otherwise, p=4, m=6: the pipeline's optimum is 21).
    sync: every stage waits for the check, 21 + 1 + 8. post-validation: stage 1 may step while
    device 0 still drains, if its own W end early: the optimum is 27 and ends device 1's last W
    at 19, before the pipeline's own optimum could end."""
    inst = make_instance(p=4, m=6, F=1, I=1, W=1,
                         step={"optimizer": [0, 8, 0, 0], "check": 1})
    options = SolveOptions(time_limit=20, workers=1, seed=0)
    none = solve(inst, options)
    assert none.status == "optimal" and none.objective_value == 21
    sync = solve(with_mode(inst, "sync"), options)
    post = solve(with_mode(inst, "post-validation"), options)
    assert (sync.status, sync.objective_value) == ("optimal", 30)
    assert (post.status, post.objective_value) == ("optimal", 27)
    last_w1 = max(post.sim.end[op] for op in post.schedule.orders[1])
    assert last_w1 <= 19 and post.sim.end[Op("OPT", 1, -1)] <= 27


@pytest.mark.parametrize("mode", MODES)
def test_greedy_scores_its_variants_with_the_step(mode):
    inst = with_mode(random_step_instance(7), mode)
    sched, sim = heuristic_schedule(inst, "makespan", time_limit=2)
    assert sim.step_mode == mode and sim.makespan == simulate(inst, sched).makespan
    assert all(op.kind in "FIWB" for op in sched.ops())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_lns_window_objective_stays_exact_with_the_step(mode, objective):
    """What the window model computes for the incumbent's own times (the reach of every device
    through the fixed tail: exits, fixed paths, the optimizer steps after the window) is the
    simulator's objective."""
    from zbsolve.solver import large
    from zbsolve.solver.model import TimeScale, scaled_instance

    inst = with_mode(random_step_instance(3), mode)
    si = scaled_instance(inst, TimeScale.choose(inst))
    graph = TaskGraph(si)
    sched, _ = heuristic_schedule(si, objective, time_limit=1)
    orders = [list(r) for r in sched.orders]
    sim = simulate(si, Schedule(orders))
    ext = large._with_tails(graph, orders, sim)
    per_device = objective == "span"
    for lo_mb, hi_mb in ((0, 1), (1, 2), (1, inst.microbatches)):
        hi_cut = large.closed_cut(graph, orders, large.mb_cut(si, orders, sim, hi_mb))
        lo_cut = large.closed_cut(graph, orders, large.mb_cut(si, orders, sim, lo_mb))
        lo_cut = [min(a, b) for a, b in zip(lo_cut, hi_cut)]
        split = list(zip(lo_cut, hi_cut))
        tails = large._post_tails(graph, ext, sim, hi_cut, per_device)
        # the search reads them off one walk of the whole schedule (large.SuffixTails)
        whole = large._post_tails(graph, ext, sim, [0] * inst.devices, per_device)
        assert dict(large.SuffixTails(whole, large.positions(ext), hi_cut)) == tails
        reach = dict(large._fixed_reach(graph, ext, sim, split, tails))

        def push(e, value, reach=reach):
            reach[e] = max(reach.get(e, 0), value)

        for d, (i, j) in enumerate(split):
            ops = ext[d][i:j]
            if not ops:
                continue
            for o in ops:
                for e, extra in large._exit_vector(graph, o, tails).items():
                    push(e, int(sim.end[o]) + extra)
            end_d = int(max(sim.end[o] for o in ops))
            if j < len(ext[d]):
                for e, extra in tails[ext[d][j]].items():
                    push(e, end_d + extra)
            else:
                push(d if per_device else 0, end_d)
        lead = large._first_heads(si) if per_device else [0] * inst.devices
        z = max(reach.get(e, 0) - lead[e] for e in range(inst.devices))
        assert z == pytest.approx(sim.value(objective)), (lo_mb, hi_mb)


def test_lns_improves_a_step_instance_and_stays_valid():
    from zbsolve.solver.large import LNSConfig, improve

    inst = make_instance(p=4, m=12, v=2, F=[1, 2, 3, 1, 2, 3, 1, 2], I=2, W=[1, 2] * 4,
                         comm=0.5, activation=1, weight=0.5, limit=8,
                         step={"mode": "post-validation", "optimizer": [6, 0, 1, 0, 6, 0, 1, 0],
                               "allreduce": 1, "check": 3})
    start, start_sim = heuristic_schedule(inst, "makespan", time_limit=0.5)
    best, sim, stats = improve(inst, start, "makespan", 6.0,
                               config=LNSConfig(window_ops=60, window_time=0.5, workers=1))
    assert sim.feasible and sim.makespan <= start_sim.makespan
    assert simulate(inst, best).makespan == sim.makespan
    assert stats.windows > 0
