"""Two replicas in opposite directions (Chimera, DualPipe) and overlapped F&B pairs (DualPipe,
DualPipeV): instance fields, task graph, simulator, generators' closed forms, solver."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbsolve.baselines import NotApplicable, evaluate_all, generate
from zbsolve.graph import TaskGraph
from zbsolve.instance import InstanceError, load_instance
from zbsolve.ops import Op, Pair
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate
from zbsolve.solver import SolveOptions, solve


def replicated(p=4, m=8, F=1.0, I=0.5, W=0.5, **extra):
    return load_instance({"devices": p, "microbatches": m, "replicas": 2,
                          "times": {"F": F, "I": I, "W": W}, **extra})


def v_inst(R, m, F=1.0, I=1.0, W=1.0, fb=None):
    data = {"devices": R, "microbatches": m, "chunks": 2, "placement": "v",
            "times": {"F": F, "I": I, "W": W}}
    if fb is not None:
        data["overlap"] = {"FB": fb}
    return load_instance(data)


# ---------------------------------------------------------------- instance and graph
def test_replica_one_runs_the_mirrored_devices_and_odd_microbatches():
    inst = replicated(p=4, m=8, memory={"activation": 1.0, "params": 0.25}, sync=0.5)
    assert inst.stages == 8 and inst.model_stages == 4
    assert inst.placement == (0, 1, 2, 3, 3, 2, 1, 0)
    assert list(inst.microbatches_of(5)) == [1, 3, 5, 7]
    assert inst.resident(0) == 0.5  # stage 0 and replica 1's copy of stage 3: two weight copies
    assert inst.to_dict()["times"]["F"] == 1.0 and inst.to_dict()["replicas"] == 2
    assert load_instance(inst.to_dict()) == inst
    g = TaskGraph(inst)
    assert g.preds(Op("F", 4, 1)) == []  # replica 1's first stage
    assert g.preds(Op("I", 7, 1)) == [(Op("F", 7, 1), 0.0)]  # its last stage
    sync = g.preds(Op("SYNC", 2, -1))
    assert {op.stage for op, _ in sync} == {2, 6} and len(sync) == 8
    assert g.count() == 3 * 8 * 4 + 4


@pytest.mark.parametrize("data, why", [
    ({"replicas": 3}, "replicas: expected 1 or 2"),
    ({"replicas": 2, "microbatches": 7}, "use an even number"),
    ({"sync": 1.0}, "needs replicas: 2"),
    ({"overlap": {"FB": 0}}, r"factor x in \(0, 1\]"),
    ({"overlap": {"FB": 1.5}}, r"factor x in \(0, 1\]"),
    ({"overlap": {"XY": 0.5}}, "key FB"),
    ({"overlap": {"FB": [[0, 0, 0.5]]}}, "two different stages"),
    ({"memory": {"params": -1}}, r"memory.params\[0\]: must be >= 0"),
])
def test_bad_new_fields_are_rejected(data, why):
    base = {"devices": 2, "microbatches": 4, "times": {"F": 1, "I": 1, "W": 1}}
    with pytest.raises(InstanceError, match=why):
        load_instance({**base, **data})


def test_sync_waits_for_both_copies_and_counts_in_the_makespan():
    inst = replicated(p=2, m=4, sync=2.0)
    sched = generate("chimera", inst)
    r = simulate(inst, sched)
    last_w = max(t for op, t in r.end.items() if op.kind in ("W", "B") and op.stage % 2 == 0)
    assert r.start[Op("SYNC", 0, -1)] == pytest.approx(last_w)
    assert r.makespan == pytest.approx(max(r.end[Op("SYNC", s, -1)] for s in range(2)))
    with pytest.raises(ScheduleError, match="runs on no device"):
        simulate(inst, Schedule([sched.orders[0] + [Op("SYNC", 0, -1)], sched.orders[1]]))


def test_wrong_replica_microbatch_is_named():
    inst = replicated(p=2, m=4)
    orders = [list(r) for r in generate("chimera", inst).orders]
    orders[0][0] = Op("F", 0, 1)  # stage 0 is replica 0's: even microbatches only
    with pytest.raises(ScheduleError, match="replica 0's copy, which runs microbatches j with"):
        simulate(inst, Schedule(orders))


# ---------------------------------------------------------------- closed forms
@pytest.mark.parametrize("D", [2, 4, 6, 8])
@pytest.mark.parametrize("units", [1, 2, 3])
def test_chimera_bubble_is_the_papers(D, units):
    """F = full B = one unit slot: Chimera (D-2)/(2N+D-2) against 1F1B's (D-1)/(N+D-1)."""
    N = units * D
    inst = replicated(p=D, m=N, F=1.0, I=0.5, W=0.5)
    r = simulate(inst, generate("chimera", inst))
    assert r.makespan == 2 * N + D - 2
    assert r.bubble_makespan == pytest.approx((D - 2) / (2 * N + D - 2), abs=1e-12)
    one = load_instance({"devices": D, "microbatches": N, "times": {"F": 1, "I": 0.5, "W": 0.5}})
    assert simulate(one, generate("1f1b", one)).bubble_makespan == pytest.approx(
        (D - 1) / (N + D - 1), abs=1e-12)


@pytest.mark.parametrize("R", [2, 3, 4, 6])
@pytest.mark.parametrize("fb", [3.0, 2.5, 2.0])
def test_dualpipev_pairs_idle_is_deepseeks_formula(R, fb):
    """F = I = W = 1 (B = 2): the worst rank idles (R-1)(F&B + B - 3W) against the makespan."""
    inst = v_inst(R, 4 * R, fb=fb / 3)
    sched = generate("dualpipev", inst)
    assert sum(isinstance(e, Pair) for row in sched.orders for e in row) > 0
    r = simulate(inst, sched)
    assert max(r.idle) == pytest.approx((R - 1) * (fb + 2 - 3), abs=1e-9)


@pytest.mark.parametrize("p", [4, 8])
@pytest.mark.parametrize("fb", [3.0, 2.0])
def test_dualpipe_idle_and_memory_are_deepseeks(p, fb):
    inst = replicated(p=p, m=4 * p, I=1.0, W=1.0, overlap={"FB": fb / 3})
    r = simulate(inst, generate("dualpipe", inst))
    assert max(r.idle) == pytest.approx((p // 2 - 1) * (fb + 2 - 3), abs=1e-9)
    assert r.peak_memory == [p + 1.0] * p  # PP + 1 activations, the README's table


def test_dualpipev_uneven_costs_idle_more_than_the_formula():
    """(F, I, W, F&B) = (1, 0.8, 1.2, 3.0), 4 ranks, 16 microbatches: the formula says 4.2."""
    inst = v_inst(4, 16, I=0.8, W=1.2, fb=1.0)
    assert max(simulate(inst, generate("dualpipev", inst)).idle) == pytest.approx(6.0)


def test_without_overlap_dualpipev_keeps_pytorchs_sequential_order():
    inst = v_inst(4, 10)
    assert not generate("dualpipev", inst).has_pairs


def test_applicability_reasons():
    inst = replicated(p=3, m=6)
    by_name = {r.name: r for r in evaluate_all(inst)}
    assert "needs an even number" in by_name["chimera"].reason
    assert "needs one model replica" in by_name["zb-h1"].reason
    with pytest.raises(NotApplicable, match="microbatches >= 2 x ranks"):
        generate("dualpipe", replicated(p=4, m=6))


# ---------------------------------------------------------------- pairs in the simulator
def test_pair_is_one_job_with_both_outputs_at_its_end():
    inst = v_inst(2, 4, fb=0.5)
    sched = generate("dualpipev", inst)
    r = simulate(inst, sched)
    pair = next(e for row in sched.orders for e in row if isinstance(e, Pair))
    a, b = pair
    assert r.start[a] == r.start[b] and r.end[a] == r.end[b]
    assert r.end[a] - r.start[a] == pytest.approx(0.5 * (inst.F[a.stage] + 2.0))


def test_pairs_the_instance_forbids_are_rejected():
    inst = v_inst(2, 4)  # no overlap field
    with_pairs = generate("dualpipev", v_inst(2, 4, fb=0.5))
    with pytest.raises(ScheduleError, match="allows no overlapped F&B"):
        simulate(inst, with_pairs)


# ---------------------------------------------------------------- properties
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 4, 6]), st.integers(1, 4), st.integers(0, 10**6),
       st.sampled_from([None, 0.7, 1.0]))
def test_bidirectional_families_are_valid_on_random_instances(p, units, seed, fb):
    rng = random.Random(seed)
    S = p
    data = {"devices": p, "microbatches": 2 * p * units, "replicas": 2,
            "times": {k: [round(rng.uniform(0.3, 2), 3) for _ in range(S)] for k in "FIW"},
            "comm": rng.choice([0.0, 0.1]), "sync": round(rng.uniform(0, 1), 3)}
    if fb is not None:
        data["overlap"] = {"FB": fb}
    inst = load_instance(data)
    from zbsolve.export.executor import lower
    from zbsolve.export.p2p_check import require_safe

    for name in ("chimera", "dualpipe"):
        sched = generate(name, inst)
        r = simulate(inst, sched)
        assert r.makespan >= max(inst.device_work(d) for d in range(p)) * (fb or 1.0) - 1e-9
        if not sched.has_pairs:
            require_safe(lower(inst, sched))


# ---------------------------------------------------------------- solver
def test_solver_on_two_replicas_is_never_worse_than_the_families():
    inst = replicated(p=4, m=8, I=1.0, W=1.0, sync=0.5,
                      memory={"activation": 1.0, "weight": 0.4, "params": 0.5})
    res = solve(inst, SolveOptions(time_limit=20, workers=2, seed=0))
    for b in res.baselines:
        if b.applicable:
            assert res.objective_value <= b.result.makespan + 1e-9
    assert res.lower_bound <= res.objective_value
    simulate(inst, res.schedule)


def test_solver_chooses_overlapped_pairs_and_beats_the_fixed_pattern():
    """Which F pairs with which backward is the solver's choice: on a small V instance with
    cheap overlap CP-SAT proves an optimum below DualPipeV's fixed pattern, using pairs, and
    the exported table with OVERLAP_F_B actions passes the P2P check."""
    from zbsolve.export.executor import lower
    from zbsolve.export.p2p_check import require_safe

    inst = load_instance({"devices": 2, "microbatches": 4, "chunks": 2, "placement": "v",
                          "times": {"F": 1, "I": 1, "W": 1}, "overlap": {"FB": 0.5},
                          "comm": 0.1})
    res = solve(inst, SolveOptions(time_limit=30, workers=2, seed=0))
    pattern = simulate(inst, generate("dualpipev", inst)).makespan
    # 19.8 before the Ws a pair may absorb lost their own microbatch order, which cut the
    # optimum off (tests/test_bounds.py, W_FOLLOWS_I)
    assert res.status == "optimal" and res.objective_value == pytest.approx(19.7)
    assert res.objective_value < pattern == pytest.approx(21.4)
    assert res.schedule.has_pairs and res.schedule.meta["source"] == "exact"
    table = lower(inst, res.schedule)
    assert any(a.is_pair for row in table.actions for a in row)
    require_safe(table)


def test_span_with_overlapped_pairs_is_solved_not_fallen_back():
    # the model pinned each device's first start to a head computed with pair-shortened
    # forwards, which no schedule reaches: CP-SAT said infeasible and solve fell back to
    # 20.7. The heads now use full forwards (TaskGraph.device_heads) and nothing is pinned
    inst = load_instance({"devices": 2, "microbatches": 4, "chunks": 2, "placement": "v",
                          "times": {"F": 1, "I": 1, "W": 1}, "overlap": {"FB": 0.5},
                          "comm": 0.1})
    res = solve(inst, SolveOptions(time_limit=30, workers=2, seed=0, objective="span"))
    assert res.status == "optimal" and res.schedule.meta["source"] == "exact"
    assert res.objective_value == pytest.approx(19.4)  # 19.7 under the W chains (above)
    assert simulate(inst, generate("dualpipev", inst)).max_span == pytest.approx(21.4)


def test_solver_is_not_bound_to_the_pattern_where_its_formula_fails():
    """(F, I, W, F&B) = (1, 0.8, 1.2, 3.0), 4 ranks, 16 microbatches: DualPipeV idles 6.0,
    the README formula predicts 4.2; the solver's schedule idles at most that."""
    inst = v_inst(4, 16, I=0.8, W=1.2, fb=1.0)
    res = solve(inst, SolveOptions(time_limit=30, workers=2, seed=0))
    assert max(res.sim.idle) <= 4.2 + 1e-9


def test_pair_up_merges_neighbours_only_where_the_simulator_says_it_helps():
    from zbsolve.solver.pairing import pair_up

    inst = v_inst(4, 16, fb=2 / 3)
    base = generate("zb-v", inst)
    sched, sim = pair_up(inst, base, time_limit=5.0)
    assert sched.has_pairs and sim.makespan < simulate(inst, base).makespan - 1
    assert simulate(inst, sched).makespan == sim.makespan
    same, _ = pair_up(v_inst(4, 16), base)  # no overlap allowed: unchanged
    assert same is base


def test_greedy_that_deadlocks_everywhere_is_reported_and_the_solver_still_answers():
    """Chimera at its own peak (p = 4, m = 16): every greedy variant deadlocks; the greedy says so
    (it once recursed without end) and the solver answers from the other candidates."""
    from zbsolve.bench_bidirectional import _two_replicas, at_own_peak
    from zbsolve.solver.heuristic import GreedyDeadlock, GreedyParams, heuristic_schedule

    inst, chimera = at_own_peak("chimera", _two_replicas(4, 16, None))
    with pytest.raises(GreedyDeadlock, match="every greedy variant deadlocked"):
        heuristic_schedule(inst, "makespan", [GreedyParams()])
    res = solve(inst, SolveOptions(time_limit=5, workers=1, seed=0))
    assert res.sim.feasible and res.objective_value <= chimera + 1e-6


def test_the_instance_without_pairs_is_solved_first_where_no_paired_pattern_fits():
    """Every schedule of the instance without pairs is one of the instance's (its ops alone):
    where DualPipeV's pattern does not fit the memory, the solve starts from that instance's
    optimum and ends no worse; where it fits, it starts from the pattern (docs/solver.md,
    "Without pairs first")."""
    data = {"devices": 2, "microbatches": 3, "chunks": 2, "placement": "v", "comm": 0.1,
            "times": {"F": 1, "I": 1, "W": 1}, "overlap": {"FB": 0.5},
            "memory": {"activation": 1, "weight": 0.5, "limit": 3}}
    inst = load_instance(data)
    options = SolveOptions(time_limit=5, workers=2, seed=0, deterministic=True,
                           memory_tiebreak=False)
    plain = solve(inst.with_(overlap=None), options)
    assert plain.status == "optimal" and plain.objective_value == pytest.approx(20.8)
    res = solve(inst, options)
    first = res.schedule.meta["solver"]["unpaired_first"]
    assert first["status"] == "optimal" and first["value"] == pytest.approx(20.8)
    assert res.objective_value <= first["best"] + 1e-9
    assert res.status == "optimal" and res.objective_value == pytest.approx(19.3)
    # four microbatches without the limit: DualPipeV's pattern fits, and the phase (a quarter
    # of these 5 s, so it would run) does not, although the search goes on after the pattern
    free = solve(load_instance({**data, "microbatches": 4}).with_(limit=None), options)
    assert any(b.name == "dualpipev" and b.result.feasible for b in free.baselines)
    assert any(p["phase"] == "exact" for p in free.schedule.meta["solver"]["phases"])
    assert "unpaired_first" not in free.schedule.meta["solver"]
