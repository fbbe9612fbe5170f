"""The simulator is the single judge: exact seed numbers, precise rejections, invariants."""

from __future__ import annotations

import random

import pytest
from conftest import make_instance, moderate_floats, random_valid_schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbsolve.baselines import evaluate_all
from zbsolve.baselines.classic import gpipe, one_f_one_b
from zbsolve.graph import TaskGraph
from zbsolve.numeric import TIME_EPS as EPS
from zbsolve.ops import Op, ops_of
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate, validate
from zbsolve.solver.bounds import device_lower_bounds


def test_seed_teaching_example():
    inst = make_instance(p=4, m=8, F=1, I=1, W=1)
    for gen, peak0 in ((gpipe, 8), (one_f_one_b, 4)):
        r = simulate(inst, gen(inst))
        assert r.makespan == 33
        assert r.bubble_makespan == pytest.approx(9 / 33)
        assert r.peak_memory[0] == peak0
    assert simulate(inst, one_f_one_b(inst)).peak_memory == [4, 3, 2, 1]


def test_full_backward_of_one_gives_2_m_plus_p_minus_1():
    inst = make_instance(p=4, m=8, F=1, I=0.5, W=0.5)
    assert simulate(inst, gpipe(inst)).makespan == 22
    assert simulate(inst, one_f_one_b(inst)).makespan == 22


def test_fused_backward_hands_off_later_than_split():
    """B sends its input gradient when it ends; a split I sends it when I ends."""
    inst = make_instance(p=2, m=1, F=1, I=1, W=1)
    fused = Schedule([[Op("F", 0, 0), Op("B", 0, 0)], [Op("F", 1, 0), Op("B", 1, 0)]])
    split = Schedule([[Op("F", 0, 0), Op("I", 0, 0), Op("W", 0, 0)],
                      [Op("F", 1, 0), Op("I", 1, 0), Op("W", 1, 0)]])
    assert simulate(inst, fused).start[Op("B", 0, 0)] == 4
    assert simulate(inst, split).start[Op("I", 0, 0)] == 3
    assert simulate(inst, split).makespan == 5


def test_comm_only_across_devices():
    inst = make_instance(p=2, m=1, v=2, placement="v", F=1, I=1, W=1, comm=0.5)
    # V placement: stages 1 and 2 share device 1, so that hand-off is free.
    sched = Schedule([
        [Op("F", 0, 0), Op("F", 3, 0), Op("I", 3, 0), Op("W", 3, 0), Op("I", 0, 0), Op("W", 0, 0)],
        [Op("F", 1, 0), Op("F", 2, 0), Op("I", 2, 0), Op("I", 1, 0), Op("W", 2, 0), Op("W", 1, 0)],
    ])
    r = simulate(inst, sched)
    assert r.start[Op("F", 1, 0)] == 1.5
    assert r.start[Op("F", 2, 0)] == 2.5
    assert r.start[Op("F", 3, 0)] == 4.0
    assert r.start[Op("I", 2, 0)] == 6.5


def test_memory_peak_and_release_with_weight():
    inst = make_instance(p=1, m=2, F=1, I=1, W=1, activation=1.0, weight=0.25, limit=1.5)
    sched = Schedule([[Op("F", 0, 0), Op("I", 0, 0), Op("F", 0, 1), Op("I", 0, 1),
                       Op("W", 0, 0), Op("W", 0, 1)]])
    r = simulate(inst, sched)
    assert r.peak_memory == [1.25]
    assert r.memory_curve[0][-1][1] == pytest.approx(0.0)
    assert r.feasible


def test_memory_over_limit_names_device_time_and_excess():
    inst = make_instance(p=4, m=8, limit=[8, 8, 2, 8])
    r = simulate(inst, gpipe(inst))
    assert not r.feasible
    (msg,) = r.violations
    assert "device 2 exceeds its memory limit 2" in msg
    assert "reaches 3 at t=4" in msg and "2F2" in msg and "over by 1" in msg
    with pytest.raises(ScheduleError, match="device 2 exceeds"):
        validate(inst, gpipe(inst))


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda o: o[0].pop(), "missing op(s): 0W7"),
        (lambda o: o[0].append(Op("F", 0, 3)), "duplicate op(s): 0F3"),
        (lambda o: o[1].append(o[0].pop()), "stage 0 runs on devices [0, 1]"),
        (lambda o: o.__setitem__(0, o[0][::-1]), "comes before its input backward"),
        (lambda o: o[0].append(Op("F", 0, 99)), "out of range"),
        (lambda o: o[0].insert(0, Op("B", 0, 0)), "both fused (B) and split"),
    ],
)
def test_structural_errors(mutate, needle):
    inst = make_instance(p=2, m=8)
    sched = one_f_one_b(inst)
    orders = [[op for o in (sched.orders[d],) for x in o for op in
               ([Op("I", x.stage, x.mb), Op("W", x.stage, x.mb)] if x.kind == "B" else [x])]
              for d in range(2)]
    mutate(orders)
    with pytest.raises(ScheduleError) as err:
        simulate(inst, Schedule(orders))
    assert needle in str(err.value)


def test_wrong_device_and_row_count():
    inst = make_instance(p=2, m=1)
    s = Schedule([[Op("F", 1, 0), Op("B", 1, 0)], [Op("F", 0, 0), Op("B", 0, 0)]])
    with pytest.raises(ScheduleError, match="stage 0 is scheduled on device 1 but the instance places it on device 0"):
        simulate(inst, s)
    with pytest.raises(ScheduleError, match="1 device rows, the instance has 2"):
        simulate(inst, Schedule([[]]))


def test_deadlock_says_where_each_device_waits():
    inst = make_instance(p=2, m=2)
    sched = Schedule([
        [Op("F", 0, 1), Op("F", 0, 0), Op("B", 0, 0), Op("B", 0, 1)],
        [Op("F", 1, 0), Op("B", 1, 1), Op("F", 1, 1), Op("B", 1, 0)],
    ])
    with pytest.raises(ScheduleError) as err:
        simulate(inst, sched)
    msg = str(err.value)
    assert msg.startswith("deadlock:")
    assert "device 0 waits at position 2 on 0B0, which needs 1B0 (device 1)" in msg
    assert "device 1 waits at position 1 on 1B1, which needs 1F1 (device 1)" in msg


def test_task_graph_dependencies_spelled_out():
    """The dependency rules on a loop placement p=2, v=2 (stages 0..3 on devices 0, 1, 0, 1)
    and a V placement (the turn at the last device stays on that device: no comm)."""
    inst = make_instance(p=2, m=2, v=2, comm=0.25)
    g = TaskGraph(inst)
    assert g.count() == 3 * 4 * 2 == len(list(g.ops()))
    assert g.preds(Op("F", 0, 1)) == []
    assert g.preds(Op("F", 2, 1)) == [(Op("F", 1, 1), 0.25)]
    assert g.preds(Op("I", 3, 0)) == [(Op("F", 3, 0), 0.0)]
    assert g.preds(Op("I", 1, 0)) == [(Op("I", 2, 0), 0.25)]
    assert g.preds(Op("W", 2, 1)) == [(Op("I", 2, 1), 0.0)]
    fused = TaskGraph(inst, {(2, 0, 0)})
    assert fused.preds(Op("I", 1, 0)) == [(Op("B", 2, 0), 0.25)]
    assert fused.succs(Op("B", 2, 0)) == [(Op("I", 1, 0), 0.25)]
    v = TaskGraph(make_instance(p=2, m=2, v=2, placement="v", comm=0.25))
    assert v.preds(Op("F", 2, 0)) == [(Op("F", 1, 0), 0.0)]  # stages 1 and 2 on device 1
    assert v.preds(Op("I", 0, 0)) == [(Op("I", 1, 0), 0.25)]
    for graph in (g, fused, v):  # successors are exactly the mirror of predecessors
        mirror = {(q, op, c) for op in graph.ops() for q, c in graph.preds(op)}
        assert mirror == {(op, n, c) for op in graph.ops() for n, c in graph.succs(op)}


# ---------------------------------------------------------------- property tests
instances = st.builds(
    lambda p, m, v, placement, seed, comm, weight_frac, limit: _random_instance(
        p, m, v, placement, seed, comm, weight_frac, limit),
    st.integers(1, 8), st.integers(1, 24), st.integers(1, 3), st.sampled_from(["loop", "v"]),
    st.integers(0, 10**6), st.sampled_from([0.0, 0.1, 0.7]), moderate_floats(0, 1),
    st.sampled_from([None, 2.0, 6.0]),
)


def _random_instance(p, m, v, placement, seed, comm, weight_frac, limit):
    rng = random.Random(seed)
    S = p * v
    act = [round(rng.uniform(0.5, 2), 3) for _ in range(S)]
    return make_instance(
        p=p, m=m, v=v, placement=placement, comm=comm,
        F=[round(rng.uniform(0.5, 3), 3) for _ in range(S)],
        I=[round(rng.uniform(0.5, 3), 3) for _ in range(S)],
        W=[round(rng.uniform(0.2, 2), 3) for _ in range(S)],
        activation=act, weight=[round(a * weight_frac, 3) for a in act], limit=limit,
    )


def _check_heads(inst, sched, r) -> tuple[list[float], list[float]]:
    """No device starts before its head, and its span runs from there to its last end;
    returns the heads and the devices' first starts."""
    heads, firsts = TaskGraph(inst).device_heads(), []
    for d, (order, h) in enumerate(zip(sched.orders, heads)):
        ops = [op for entry in order for op in ops_of(entry)]
        firsts.append(min(r.start[op] for op in ops))
        assert firsts[-1] >= h - EPS
        assert r.span[d] == pytest.approx(max(r.end[op] for op in ops) - h)
    return heads, firsts


def _check_invariants(inst, sched, r):
    lbs = device_lower_bounds(inst)
    _check_heads(inst, sched, r)
    for d, order in enumerate(sched.orders):
        assert r.busy[d] == pytest.approx(inst.device_work(d))
        assert r.makespan >= lbs[d] - EPS
        assert r.span[d] <= r.makespan + EPS
        assert r.memory_curve[d][-1][1] == pytest.approx(0.0, abs=1e-6)
        free = 0.0
        graph = TaskGraph.of(inst, sched.ops())
        for op in order:  # ASAP: no op could have started earlier
            ready = max([free] + [r.end[q] + delay for q, delay in graph.preds(op)])
            assert r.start[op] == pytest.approx(ready)
            free = r.end[op]
    assert -EPS <= r.bubble_span <= r.bubble_makespan + EPS < 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances, st.integers(0, 10**6))
def test_random_valid_orders_simulate_with_invariants(inst, seed):
    sched = random_valid_schedule(inst, random.Random(seed))
    _check_invariants(inst, sched, simulate(inst, sched))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances)
def test_every_applicable_generator_passes_the_simulator(inst):
    for res in evaluate_all(inst):
        if res.applicable:
            _check_invariants(inst, res.schedule, res.result)


@pytest.mark.parametrize("extra", [dict(v=2, placement="v", overlap={"FB": 0.6}),
                                   dict(replicas=2, m=8), dict(replicas=2, m=8, overlap={"FB": 0.5}),
                                   dict(segments=2), dict(v=2, comm=0.5)])
def test_no_device_starts_before_its_head_in_any_family(extra):
    # the heads use full forwards even where pairs could shorten them: before a device's first
    # op no backward has run, so no pair either (TaskGraph.device_heads). Every published
    # family starts each device at its head, so its spans are the first-start-to-end ones
    inst = make_instance(**{"p": 4, "m": 8, "F": 1.5, "I": 1.0, "W": 0.5, **extra})
    ran = [res for res in evaluate_all(inst) if res.applicable]
    assert ran
    for res in ran:
        heads, firsts = _check_heads(inst, res.schedule, res.result)
        assert firsts == pytest.approx(heads), res.name


def test_a_device_that_starts_late_is_measured_from_its_head():
    # device 1 runs microbatch 1's forward first: it starts one forward after its head, and
    # its span still counts from the head (a late start shortens nothing)
    inst = make_instance(p=2, m=2, F=2.0, comm=0.5)
    F, I, W = (lambda s, j, k=k: Op(k, s, j) for k in "FIW")
    late = Schedule([[F(0, 0), F(0, 1), I(0, 0), W(0, 0), I(0, 1), W(0, 1)],
                     [F(1, 1), F(1, 0), I(1, 0), W(1, 0), I(1, 1), W(1, 1)]])
    r = validate(inst, late)
    assert TaskGraph(inst).device_heads() == [0.0, 2.5]
    assert r.start[F(1, 1)] == 4.5
    assert r.span[1] == pytest.approx(r.end[W(1, 1)] - 2.5)
