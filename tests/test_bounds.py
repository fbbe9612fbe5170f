"""Lower bounds: never above a proven optimum, and every term pinned where it matters.

The optima are CP-SAT's on the unreduced model (no microbatch order, no memory precedences, no
bound on the objective), one worker, fixed seed: what the bounds' proofs must not exceed. The
hypothesis tests build that model without the heads and tails as well (``blind_solve``: the
model takes them as its start domains, so an oracle with them would share their error). Each
pinned instance comes with the value the bound loses when one of its terms is removed, so a
term that silently stops working fails a test.
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
from conftest import make_instance
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from zbsolve import graph as graph_module
from zbsolve.graph import TaskGraph
from zbsolve.instance import load_instance
from zbsolve.ops import Op
from zbsolve.solver import bounds
from zbsolve.solver import model as model_module
from zbsolve.solver.bounds import MemoryEdge, analytic_bound, memory_edges, min_memory_limit
from zbsolve.solver.model import build_model


def proven(sm):
    """CP-SAT on ``sm``: one worker, seed 0, 20 s; it must prove the optimum."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 20
    assert solver.solve(sm.model) == cp_model.OPTIMAL
    return solver


def optimum(inst, objective, **kw):
    sm = build_model(inst, objective, **kw)
    return proven(sm).objective_value / sm.scale.time


UNREDUCED = dict(symmetry=False, redundant=False)

# from a development corpus of random small instances (docs/solver.md, "Bounds")
SMALL_37 = {  # explicit placement, device 1 at its one-microbatch minimum
    "devices": 2, "microbatches": 5, "chunks": 2, "placement": [1, 0, 0, 1],
    "times": {"F": [4, 4, 3, 2], "I": 3, "W": [2, 1, 3, 3]}, "comm": 1,
    "memory": {"activation": [1, 2, 1, 1], "weight": [0, 1, 0, 0.5], "limit": [6, 2]}}
SMALL_26 = {  # V, device 1 at its minimum: the W edge decides
    "devices": 2, "microbatches": 2, "chunks": 2, "placement": "v",
    "times": {"F": [1, 4, 1, 3], "I": [2, 3, 1, 2], "W": [1, 1, 1, 3]}, "comm": 1,
    "memory": {"activation": 1, "weight": [0.5, 0.5, 0.5, 0], "limit": [5, 2]}}
SMALL_20 = {  # loop v = 2, tight limits on every device
    "devices": 3, "microbatches": 5, "chunks": 2, "placement": "loop",
    "times": {"F": [4, 1, 3, 1, 3, 1], "I": [3, 1, 2, 1, 3, 1], "W": [2, 2, 2, 1, 2, 1]},
    "memory": {"activation": [2, 1, 1, 1, 1, 1], "weight": [0, 0.5, 0.5, 0.5, 0.5, 0.5],
               "limit": [4, 2, 3]}}


def _nested(jobs):
    """The one-machine bound before Jackson's preemptive schedule: two nested subset families."""
    best = 0.0
    work, min_tail = 0.0, float("inf")
    for h, p, q in sorted(jobs, key=lambda x: -x[0]):
        work, min_tail = work + p, min(min_tail, q)
        best = max(best, h + work + min_tail)
    work, min_head = 0.0, float("inf")
    for h, p, q in sorted(jobs, key=lambda x: -x[2]):
        work, min_head = work + p, min(min_head, h)
        best = max(best, min_head + work + q)
    return best


def _without(monkeypatch, term):
    if term in ("I", "W", "I down"):
        keep = memory_edges

        def kind(e):  # "I down": a higher stage's I before a lower stage's F (the third kind)
            return "I down" if e.kind == "I" and e.source > e.stage else e.kind
        monkeypatch.setattr(bounds, "memory_edges",
                            lambda inst, d: [e for e in keep(inst, d) if kind(e) != term])
    elif term == "preemptive":
        monkeypatch.setattr(bounds, "_one_machine_bound", _nested)
    elif term == "device tails":
        monkeypatch.setattr(bounds, "device_tails", lambda *a, **k: {})
    elif term == "tails":
        keep_ht = bounds.heads_tails

        def no_tails(*a, **k):
            ht = keep_ht(*a, **k)
            ht.tail.update(dict.fromkeys(ht.tail, 0.0))
            return ht
        monkeypatch.setattr(bounds, "heads_tails", no_tails)


@pytest.mark.parametrize("case, objective, value, optimum_value, lost", [
    # (before the "I down" edges: 99, 97, 36 and 90; docs/solver.md, "Bounds")
    (SMALL_37, "makespan", 105.0, 115.0, {"I": 103.0, "I down": 98.0, "preemptive": 103.0,
                                           "tails": 103.0}),
    (SMALL_37, "span", 103.0, 115.0, {"I down": 97.0}),
    (SMALL_26, "makespan", 40.0, 40.0, {"W": 38.0, "I down": 36.0, "preemptive": 35.0,
                                         "tails": 35.0}),
    (SMALL_20, "makespan", 98.0, 102.0, {"I down": 90.0}),
])
def test_bound_values_are_pinned_and_each_term_matters(monkeypatch, case, objective, value,
                                                        optimum_value, lost):
    inst = load_instance(case)
    assert analytic_bound(inst, objective) == pytest.approx(value)
    assert value <= optimum_value  # optimum_value: test_pinned_optima
    for term, weaker in lost.items():
        with monkeypatch.context() as mp:
            _without(mp, term)
            assert analytic_bound(inst, objective) == pytest.approx(weaker), term


def test_pinned_optima():
    # proven by the solver's model; that it keeps the unreduced optimum is the hypothesis test
    # below (the unreduced model needs minutes on these 40-60 ops)
    for case, objective, value in [(SMALL_37, "makespan", 115.0), (SMALL_37, "span", 115.0),
                                   (SMALL_26, "makespan", 40.0), (SMALL_20, "makespan", 102.0)]:
        assert optimum(load_instance(case), objective) == pytest.approx(value)
    assert optimum(load_instance(SMALL_26), "makespan", **UNREDUCED) == pytest.approx(40.0)


def test_edges_index_every_pred_and_mirror_the_succs():
    """``bounds.edges``, the one walk the longest-path users share: each op's ``_preds`` by
    index, every edge forward in the order, successors the mirror image, and on a subset of
    the ops the edges from outside it left out."""
    inst = load_instance(SMALL_26)
    graph = TaskGraph(inst)
    mem = bounds.memory_precedences(inst)
    assert mem  # the memory edges are among those indexed
    ops = graph.topological(implicit=True)
    e = bounds.edges(graph, ops, True, mem)
    assert e.ops == ops and [e.index[op] for op in ops] == list(range(len(ops)))
    for i, op in enumerate(ops):
        assert sorted(e.preds[i]) == sorted((e.index[q], w)
                                            for q, w in bounds._preds(graph, op, True, mem))
        assert all(j < i for j, _ in e.preds[i])
    into = sorted((j, i, w) for i, ps in enumerate(e.preds) for j, w in ps)
    assert into == sorted((j, i, w) for j, out in enumerate(e.succs) for i, w in out)
    late = ops[len(ops) // 2:]
    sub = bounds.edges(graph, late, True, mem)
    assert sub.preds[0] == [] and any(bounds._preds(graph, late[0], True, mem))
    assert sum(map(len, sub.preds)) < sum(map(len, e.preds[len(ops) // 2:]))


def test_memory_edges_follow_their_formulas():
    # device 1 of SMALL_37 holds stages 0 (activation 1, kept 0) and 3 (1, kept 0.5), limit 2:
    # A_0 = 1, A_3 = 2. I: L = floor((2 - A_t) / A_s) + 1; W: floor((2 - A_t) / w_s) + 1;
    # I(3, j) -> F(0, j+L) ("I down"): floor((2 - A_3) / A_0) + 1 = 1.
    inst = load_instance(SMALL_37)
    assert min_memory_limit(inst) == [3.0, 2.0]
    assert sorted(memory_edges(inst, 1)) == sorted([
        MemoryEdge("I", 0, 0, 2), MemoryEdge("I", 0, 3, 1), MemoryEdge("I", 3, 0, 1),
        MemoryEdge("I", 3, 3, 1), MemoryEdge("W", 3, 3, 1)])
    assert memory_edges(inst.with_(limit=[6, 100]), 1) == []  # never binds: no edge
    # two replicas: device 1 holds stages 0 and 3 of replica 0 (A_0 = 1, A_3 = 2) and 5 and 6
    # of replica 1 (A_5 = 2, A_6 = 3), limit 3; each replica's edges on its own stages, what
    # the other replica holds counted as nothing, L microbatches of a replica 2 L indices
    # apart: I(0, 0) (L = 3) and W(3, 3) (w = 0.5, L = 3) reach past m = 6 and go
    two = inst.with_(replicas=2, microbatches=6, limit=[6, 3])
    assert sorted(memory_edges(two, 1)) == sorted([
        MemoryEdge("I", 0, 3, 4), MemoryEdge("I", 3, 0, 4), MemoryEdge("I", 3, 3, 2),
        MemoryEdge("I", 5, 5, 2), MemoryEdge("W", 5, 5, 4), MemoryEdge("I", 5, 6, 2),
        MemoryEdge("W", 5, 6, 2), MemoryEdge("I", 6, 5, 2), MemoryEdge("I", 6, 6, 2)])
    assert bounds.in_flight_caps(two, 1) == {3: 1, 5: 1, 6: 1}  # in microbatches of a replica
    # with pairs the edges hold as they are (what a forward's start finds, alone or in a
    # pair); no pair fits device 1 at 2, so neither stage's W may be absorbed: all five
    assert memory_edges(inst.with_(overlap={"FB": 0.8}), 1) == memory_edges(inst, 1)
    # at 3 pairs fit (3 = stages 0 and 3 of one microbatch and stage 0 of another), and the W
    # edge goes: a W a pair may absorb follows its I, not the Ws' order
    roomy = inst.with_(limit=[6, 3])
    assert sorted(memory_edges(roomy.with_(overlap={"FB": 0.8}), 1)) == sorted(
        e for e in memory_edges(roomy, 1) if e.kind == "I")
    assert memory_edges(inst.with_(segments=2), 1) == []  # segments: gated
    assert bounds.in_flight_caps(inst, 1) == {0: 2, 3: 1}


def test_preemptive_bound_dominates_the_nested_families():
    jobs = [(0, 3, 5), (1, 2, 9), (4, 4, 0), (6, 1, 7), (2, 5, 2)]
    assert bounds._one_machine_bound(jobs) >= _nested(jobs)
    # Jackson: a runs 0-1, b (larger tail) preempts 1-3, a 3-5, e 5-10 ...: max C + q = 14
    assert bounds._one_machine_bound([(0, 3, 5), (1, 2, 9), (2, 5, 2), (4, 4, 0)]) == 14


@st.composite
def tiny_multichunk(draw):
    p = draw(st.sampled_from([2, 3]))
    v = draw(st.sampled_from([2, 3] if p == 2 else [2]))
    kind = draw(st.sampled_from(["v", "loop", "explicit"] if v == 2 else ["loop", "explicit"]))
    m = draw(st.integers(2, 4 if p * v <= 4 else 3))
    n = p * v
    placement = kind
    if kind == "explicit":
        placement = draw(st.permutations([d for d in range(p) for _ in range(v)]))
    ints = st.integers(1, 4)
    times = {k: draw(st.lists(ints, min_size=n, max_size=n)) for k in ("F", "I", "W")}
    act = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=n, max_size=n))
    weight = [a * draw(st.sampled_from([0.0, 0.5])) for a in act]
    data = {"devices": p, "microbatches": m, "chunks": v, "placement": placement,
            "times": times, "comm": draw(st.sampled_from([0, 1])),
            "memory": {"activation": act, "weight": weight}}
    need = min_memory_limit(load_instance(data))
    data["memory"]["limit"] = [x + draw(st.sampled_from([0, 0, 1, 2, 20])) for x in need]
    return load_instance(data)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]))
def test_bound_and_reduced_model_keep_the_optimum(inst, objective):
    bound_and_model_agree_with_the_oracle(inst, objective)


def bound_and_model_agree_with_the_oracle(inst, objective):
    best, start, end = blind_solve(inst, objective)  # a model that does not read the heads
    assert analytic_bound(inst, objective) <= best + 1e-9
    heads_and_tails_hold(inst, start, end)
    # in microbatch order the optimum is the same (relabelling), and there the ordered heads
    # and tails hold, memory edges included (that model has its memory, not the edges)
    in_order, start, end = blind_solve(inst, objective, ordered=True)
    assert in_order == pytest.approx(best)
    heads_and_tails_hold(inst, start, end, ordered=True)
    # the solver's model (microbatch order, memory precedences, objective >= the bound; with
    # pairs: on the pairs' ends, no pair the memory cannot hold) keeps it
    assert optimum(inst, objective) == pytest.approx(best)


@st.composite
def tiny_two_replicas(draw):
    """Two replicas on two devices, one chunk or two (V or loop), under limits from the least
    feasible one up: the replicas share each device's memory, which their edges do not see."""
    v = draw(st.sampled_from([1, 2]))
    n = 2 * v
    data = {"devices": 2, "replicas": 2, "chunks": v,
            "microbatches": draw(st.sampled_from([2, 4] if v == 2 else [4, 6]))}
    if v == 2:
        data["placement"] = draw(st.sampled_from(["v", "loop"]))
    ints = st.lists(st.integers(1, 4), min_size=n, max_size=n)
    data["times"] = {k: draw(ints) for k in ("F", "I", "W")}
    data["comm"] = draw(st.sampled_from([0, 1]))
    act = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=n, max_size=n))
    data["memory"] = {"activation": act,
                      "weight": [a * draw(st.sampled_from([0.0, 0.5])) for a in act]}
    need = min_memory_limit(load_instance(data))
    data["memory"]["limit"] = [x + draw(st.sampled_from([0, 0.5, 1, 2])) for x in need]
    return load_instance(data)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_two_replicas(), st.sampled_from(["makespan", "span"]))
def test_bound_and_reduced_model_keep_the_optimum_with_two_replicas(inst, objective):
    bound_and_model_agree_with_the_oracle(inst, objective)


# two replicas on two devices, limit 2: device 0 holds replica 0's stage 0 (2 units: one of
# its microbatches in flight, I(0, j) and W(0, j) -> F(0, j+2)) and replica 1's stage 3 (1
# unit: two, I(3, j) -> F(3, j+4)); device 1 the mirror image. The per-replica edges raise
# the bound from 51 to 52; what they miss is the replicas sharing the 2 units (optimum 62)
TWO_REPLICAS_TIGHT = {"devices": 2, "microbatches": 6, "replicas": 2,
                      "times": {"F": [4, 2], "I": [4, 2], "W": [1, 4]}, "comm": 1,
                      "memory": {"activation": [2, 1], "weight": [1, 0], "limit": 2}}


def test_replica_memory_edges_raise_the_bound_below_the_optimum():
    inst = load_instance(TWO_REPLICAS_TIGHT)
    assert analytic_bound(inst) == 52.0
    with mock.patch.object(bounds, "memory_edges", lambda *a: []):
        assert analytic_bound(inst) == 51.0  # before: no edge with two replicas
    assert blind_optimum(inst, "makespan") == pytest.approx(62.0)
    assert optimum(inst, "makespan") == pytest.approx(62.0)  # the model with the edges


def test_bounds_of_the_mutation_tests_stay_below_proven_optima():
    # tests/test_bounds_mutants.py pins these bounds: 70 (69 from the memory end bound without
    # the "I down" edges) and the span bound 19 / makespan bound 20 of a one-stage-per-device
    # instance
    from test_bounds_mutants import MEMORY_DECIDES
    assert analytic_bound(load_instance(MEMORY_DECIDES)) == 70.0
    assert optimum(load_instance(MEMORY_DECIDES), "makespan", **UNREDUCED) == pytest.approx(70.0)
    small = load_instance({"devices": 2, "microbatches": 3, "times": {"F": [2, 1], "I": 2,
                                                                      "W": [2, 3]},
                           "memory": {"activation": 1, "limit": [2, 1]}})
    for objective, bound in (("span", 19.0), ("makespan", 20.0)):
        assert analytic_bound(small, objective) == bound
        assert optimum(small, objective, **UNREDUCED) >= bound - 1e-9


# ---------------------------------------------------------------- memory_energy_bounds
LOOP_TIGHT = {  # p = 3, loop v = 2: device 0 holds stages 0 and 3, each unit 1 until its I ends
    "devices": 3, "microbatches": 6, "chunks": 2, "placement": "loop",
    "times": {"F": 2, "I": 2, "W": 1}, "comm": 1,
    "memory": {"activation": 1, "weight": 0, "limit": 4}}


def test_memory_energy_bound_by_hand(monkeypatch):
    # Device 0: stage 0's unit lives from F(0) to I(0): 6 F + 6 I of 2 and 5 + 5 hops of 1 = 34;
    # stage 3's from F(3) to I(3): 3 F + 3 I and 2 + 2 hops = 16; 6 microbatches: 300 of
    # memory-time under a limit of 4. The first forwards start 2 apart holding 1 each: the cap
    # is 1, 2, 3 on [0, 2), [2, 4), [4, 6), 12 unused; the last I likewise: (300 + 24) / 4 = 81.
    inst = load_instance(LOOP_TIGHT)
    assert bounds.memory_energy_bounds(inst) == pytest.approx([81.0, 63.0, 45.0])
    assert analytic_bound(inst) == pytest.approx(81.0)  # the other terms give 79
    assert analytic_bound(inst, "span") == pytest.approx(81.0)
    assert optimum(inst, "makespan") == pytest.approx(91.0)
    monkeypatch.setattr(bounds.Ramp, "loss", lambda self, room: (0.0, 0.0))
    assert bounds.memory_energy_bounds(inst)[0] == pytest.approx(75.0)
    assert analytic_bound(inst) == pytest.approx(79.0)


# two replicas on two devices, one unit of activation per stage, limit 1.5: a device holds one
# microbatch's unit at a time, but memory-time counts 1.5 of room. Device 0's units: replica
# 0's stage 0 (F, comm, F, I, comm, I: 6 from its forward's start to its I's end) and replica
# 1's last stage (F, I: 2), two microbatches each
ONE_IN_FLIGHT = {"devices": 2, "microbatches": 4, "replicas": 2,
                 "times": {"F": 1, "I": 1, "W": 1}, "comm": 1,
                 "memory": {"activation": 1, "limit": 1.5}}


def test_memory_time_counts_a_unit_that_leaves_no_room_as_the_whole_device():
    # the staircase u^(1) of dual_feasible weighs a share above 1/2 (1 / 1.5) as 1: the
    # span is at least the lifetimes one after the other, 2 x 6 + 2 x 2 = 16 (memory-time:
    # 16 / 1.5 and its ramps, 11.33; the other terms 13)
    inst = load_instance(ONE_IN_FLIGHT)
    assert bounds.memory_energy_bounds(inst) == [16.0, 16.0]
    assert analytic_bound(inst) == 16.0
    with mock.patch.object(bounds.dual_feasible, "family", lambda *a: []):
        assert bounds.memory_energy_bounds(inst)[0] == pytest.approx(34 / 3)
        assert analytic_bound(inst) == 13.0
    assert blind_optimum(inst, "makespan") == pytest.approx(19.0)
    # at limit 1 the room is one unit and memory-time alone says as much
    assert bounds.memory_energy_bounds(inst.with_(limit=1.0))[0] == pytest.approx(16.0)


def _cumulatives(sm):
    """(capacity, demands) of every cumulative constraint of a built model."""
    return sorted((c.cumulative.capacity.offset, [e.offset for e in c.cumulative.demands])
                  for c in sm.model.proto.constraints if c.cumulative.intervals)


def test_the_model_states_the_staircase_where_it_bounds_the_instance():
    # ONE_IN_FLIGHT's bound is u^(1)'s memory-time on both devices: each gets, beside its
    # memory (capacity 1.5 in memory units of 0.1, a unit 10), a cumulative of capacity 1
    # where each of its four units weighs 1 (floor(2 x 10 / 15) = 1): one at a time
    inst = load_instance(ONE_IN_FLIGHT)
    assert bounds.memory_stairs(inst) == ((1, 16.0), (1, 16.0))
    sm = build_model(inst, "makespan")
    assert _cumulatives(sm) == [(1, [1] * 4), (1, [1] * 4), (15, [10] * 4), (15, [10] * 4)]
    assert optimum(inst, "makespan") == pytest.approx(19.0)  # the blind oracle's
    # limit 2.5: u^(2) weighs each share 0.4 as 1/2, 8 in all, below the bound (12): left out
    roomy = inst.with_(limit=2.5)
    assert bounds.memory_stairs(roomy) == ((2, 8.0), (2, 8.0))
    assert analytic_bound(roomy) == 12.0
    assert _cumulatives(build_model(roomy, "makespan")) == [(25, [10] * 4)] * 2
    # limit 2: shares of exactly 1/2, where each staircase is taken one step down: none
    # weighs more than the plain memory-time
    assert bounds.memory_stairs(inst.with_(limit=2.0)) == (None, None)


def test_memory_energy_bound_is_gated_off_without_a_limit_or_with_modes():
    assert bounds.memory_energy_bounds(load_instance(LOOP_TIGHT).with_(limit=None)) == [None] * 3
    modes = make_instance(p=2, m=4, v=2, limit=2, recompute={"R": 0.5, "kept": 0.25})
    assert bounds.memory_energy_bounds(modes) == [None, None]


@pytest.mark.parametrize("extra", [dict(segments=2), dict(overlap={"FB": 0.8}),
                                   dict(replicas=2), dict(memory={"activation": 1, "weight": 0.5,
                                                                  "params": 1, "limit": 5})])
def test_memory_energy_bound_stays_below_the_optimum_of_other_forms(extra):
    # the argument reads only lifetimes, min_duration and the limit: no gate for segments,
    # overlapped pairs, replicas or resident params (optima of the solver's model)
    data = {**LOOP_TIGHT, "microbatches": 4, **extra}
    inst = load_instance(data)
    heads = TaskGraph(inst).device_heads()
    best = optimum(inst, "makespan")
    for d, e in enumerate(bounds.memory_energy_bounds(inst)):
        assert heads[d] + e <= best + 1e-9


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.floats(0.1, 2), st.floats(0.1, 5), st.floats(0.01, 1), st.floats(0.05, 10))
def test_ramp_loss_is_the_unused_memory_time_below_the_cap(step, every, rate, room):
    ramp = bounds.Ramp(step, every, rate)
    tau, lost = ramp.loss(room)

    def cap(t):
        return min(room, step * (math.floor(t / every) + 1), step + rate * t)
    n = 4000
    end = tau if tau > 0 else every
    h = end / n
    left = sum(room - cap(i * h) for i in range(n)) * h  # the cap rises: left sums >= the area
    right = sum(room - cap((i + 1) * h) for i in range(n)) * h
    assert right - 1e-9 <= lost <= left + 1e-9
    assert cap(tau + 1e-9) == pytest.approx(room)  # tau*: the cap is at room from there on
    assert bounds.Ramp(step, every, 0.0).loss(max(room, 2 * step))[0] == math.inf


# ---------------------------------------------------------------- overlapped pairs start late
V_PAIRS = {"devices": 2, "microbatches": 2, "chunks": 2, "placement": "v",
           "times": {"F": 2, "I": 2, "W": 2}, "overlap": {"FB": 0.5}}


def blind_model(inst, objective, ordered=False):
    """The unreduced model, built without the heads and tails it otherwise takes as its start
    domains: the oracle for a test of the heads and tails themselves (and of everything else
    the solver proves: results/audit/claims.py). ``ordered``: with the microbatch order, but
    still without the memory edges (which that model adds). Every pair the instance allows
    gets its variable, whether or not ``graph._pair_fits`` says the memory can hold it: the
    model's memory decides."""
    keep = bounds.heads_tails

    def zero(*args, **kw):
        ht = keep(*args, **kw)
        return bounds.HeadsTails(dict.fromkeys(ht.head, 0.0), dict.fromkeys(ht.tail, 0.0),
                                 ht.ordered)
    with (mock.patch.object(model_module, "heads_tails", zero),
          mock.patch.object(model_module, "_add_memory_precedences", lambda *a: None),
          mock.patch.object(graph_module, "_pair_fits", lambda *a: True)):
        return build_model(inst, objective, **{**UNREDUCED, "symmetry": ordered})


def blind_solve(inst, objective, ordered=False):
    """CP-SAT's proven optimum of ``blind_model``, and every op's start and end in it."""
    sm = blind_model(inst, objective, ordered)
    solver, unit = proven(sm), sm.scale.time
    return (solver.objective_value / unit,
            {op: solver.value(v) / unit for op, v in sm.start.items()},
            {op: (solver.value(sm.end_var[op]) if op in sm.end_var
                  else solver.value(v) + sm.duration(op)) / unit for op, v in sm.start.items()})


def heads_and_tails_hold(inst, start, end, ordered=False):
    """Every head and tail holds in the schedule ``start`` / ``end`` (unordered ones: it need
    not run microbatches in order; ordered ones, with the microbatch chains and memory edges:
    it does). A W that a pair absorbs starts with the pair, so its head bounds its end
    instead."""
    ht, graph = bounds.heads_tails(inst, ordered=ordered), TaskGraph(inst)
    last = max(end.values())
    for op, head in ht.head.items():
        if op.kind == "W":
            assert end[op] >= head + graph.min_duration(op) - 1e-9, op
        else:
            assert start[op] >= head - 1e-9, op
        assert last - end[op] >= ht.tail[op] - 1e-9, op


def blind_optimum(inst, objective):
    return blind_solve(inst, objective)[0]


def test_late_pairs_bound_by_hand(monkeypatch):
    # Every op counts 1 in a pair (x = 0.5; a W too, in its unit's fused backward), 2 alone.
    # Heads: the first microbatch's forwards run before any backward exists, alone: 0F0, 1F0,
    # 2F0, 3F0 start at 0, 2, 4, 6 and 3I0 at 8 (4 at the pair share). Device 1 (stages 1,
    # 2) counts 12 from its head 2, but no pair starts there before 9 (1F with 2I: 2I0's
    # head): what runs in [2, 9) runs alone, 1F0, 1F1, 2F0, 2F1 (heads 2, 4, 4, 6; 8 >= 7 of
    # whole durations), and does at most 0.5 * 7 of the count: 9 + 12 - 3.5 = 17.5. Jackson's
    # schedule gives both devices 17 on the new heads, 13 on the old ones.
    inst = load_instance(V_PAIRS)
    graph, ht = TaskGraph(inst), bounds.heads_tails(inst)
    assert ht.head[Op("I", 3, 0)] == 8.0 and bounds.pair_start(graph, ht.head, 1) == 9.0
    assert bounds.device_makespan_bounds(inst) == [17.0, 17.5]
    assert analytic_bound(inst) == 17.5 and analytic_bound(inst, "span") == 17.0
    assert blind_optimum(inst, "makespan") == pytest.approx(26.0)
    assert blind_optimum(inst, "span") == pytest.approx(26.0)
    monkeypatch.setattr(bounds, "_paired", lambda *a: 0.0)
    assert bounds.device_makespan_bounds(inst) == [17.0, 17.0]
    monkeypatch.setattr(bounds, "_alone_until_paired", lambda graph, e, head, dur: head)
    assert bounds.heads_tails(inst).head[Op("I", 3, 0)] == 4.0
    assert analytic_bound(inst) == 13.0 and analytic_bound(inst, "span") == 13.0


def test_late_pairs_bound_takes_the_lesser_case():
    # one forward (count 1, whole 2) that may pair only from 10 on: run alone, it ends at 2;
    # the first case alone would claim 0 + 1 + 10 - 0.5 * 2 = 10
    assert bounds._late_pairs_bound([(0.0, 1.0, 0.0, 2.0)], 10.0) == 2.0
    # no pair at all (start inf): an op that never pairs, at 3, is r; 2 + 3 - 0.5 * 2 = 4
    # against both whole, 3
    assert bounds._late_pairs_bound([(0.0, 1.0, 0.0, 2.0), (3.0, 1.0, 0.0, 1.0)],
                                    math.inf) == pytest.approx(3.0)
    assert bounds.pair_start(TaskGraph(make_instance(p=2, m=2, v=2)), {}, 0) == math.inf


@st.composite
def tiny_overlapped(draw):
    """V or loop with two chunks, or two replicas, on two devices (what CP-SAT proves in
    seconds), every forward and backward free to pair."""
    p = 2
    if draw(st.booleans()):
        n, data = p, {"devices": p, "microbatches": draw(st.sampled_from([2, 4])),
                      "replicas": 2}
    else:
        n, data = 2 * p, {"devices": p, "microbatches": draw(st.integers(2, 3)), "chunks": 2,
                          "placement": draw(st.sampled_from(["v", "loop"]))}
    ints = st.lists(st.integers(1, 5), min_size=n, max_size=n)
    data["times"] = {k: draw(ints) for k in ("F", "I", "W")}
    data["comm"] = draw(st.sampled_from([0, 1]))
    data["overlap"] = {"FB": draw(st.sampled_from([0.5, 0.8]))}
    return load_instance(data)  # no limit: the term reads none, and CP-SAT proves faster


# where the optimum pairs early enough that forwards counted whole would break a head
PAIRS_EARLY = [
    {"devices": 2, "microbatches": 4, "replicas": 2, "times": {"F": 2, "I": [1, 4], "W": 5},
     "comm": 1, "overlap": {"FB": 0.5}},
    {"devices": 2, "microbatches": 3, "chunks": 2, "placement": "v",
     "times": {"F": [1, 3, 1, 1], "I": [1, 4, 3, 5], "W": [3, 1, 1, 5]}, "overlap": {"FB": 0.5}}]


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_overlapped(), st.sampled_from(["makespan", "span"]))
@example(load_instance(PAIRS_EARLY[0]), "makespan")
@example(load_instance(PAIRS_EARLY[1]), "makespan")
def test_bound_with_overlapped_pairs_keeps_the_optimum(inst, objective):
    best, start, end = blind_solve(inst, objective)
    assert analytic_bound(inst, objective) <= best + 1e-9
    heads_and_tails_hold(inst, start, end)


# Device 0 holds stages 0 and 2 (1 unit each) under a limit of 2.5: one microbatch's two units
# at a time. A pair needs 3 as it starts: F(0, j) with the backward of (2, i) finds i holding
# stages 0 and 2 (their backwards wait on this one), and j allocating stage 0; F(2, j) with
# the backward of (0, i) finds j holding stages 0 and 2, and i stage 0. Device 1 (stages 1
# and 3: 2 and 1) needs 5 and has 3. So no pair ever runs and the instance is the one without
# overlap, whose bound is 33 (the optimum is 34 either way).
NO_ROOM_TO_PAIR = {
    "devices": 2, "microbatches": 2, "chunks": 2, "placement": "loop",
    "times": {"F": [1, 2, 3, 1], "I": 2, "W": [2, 2, 4, 2]},
    "memory": {"activation": [1, 2, 1, 1], "weight": 0.5, "limit": [2.5, 3]},
    "overlap": {"FB": 0.5}}


def test_pairs_the_memory_cannot_hold_do_not_shorten_ops():
    inst = load_instance(NO_ROOM_TO_PAIR)
    assert [list(TaskGraph(inst).pair_options(d)) for d in range(2)] == [[], []]
    roomy = TaskGraph(inst.with_(limit=[3, 5]))  # exactly what each pair needs
    assert [sorted(roomy.pair_options(d)) for d in range(2)] == [
        [(0, 2, 0.5), (2, 0, 0.5)], [(1, 3, 0.5), (3, 1, 0.5)]]
    plain = inst.with_(overlap=None)
    for objective in ("makespan", "span"):
        assert analytic_bound(inst, objective) == analytic_bound(plain, objective) == 33.0
        assert blind_optimum(inst, objective) == pytest.approx(34.0)
    # the memory edges and the memory end bound hold with pairs too (they count what the
    # device holds as a forward starts, alone or in a pair): 32 from the end bound alone
    assert bounds.memory_end_bounds(inst) == [32.0, 26.0]
    with mock.patch.object(graph_module, "_pair_fits", lambda *a: True):
        assert analytic_bound(inst) == 19.5  # every op at its pair share
        with mock.patch.object(bounds, "memory_edges", lambda *a: []):
            assert analytic_bound(inst) == 17.75  # the code before: neither


@st.composite
def tiny_overlapped_limited(draw):
    """``tiny_overlapped`` with activations, weights, resident params and a limit from the
    least feasible one up: where pairs do and do not fit. Two microbatches on one replica:
    the oracle's model keeps every pair the memory forbids, and proves three in V at the
    least limit only after more than 20 s."""
    inst = draw(tiny_overlapped())
    n = inst.model_stages
    act = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=n, max_size=n))
    data = inst.to_dict()
    if inst.replicas == 1:
        data["microbatches"] = 2
    data["memory"] = {"activation": act,
                      "weight": [a * draw(st.sampled_from([0.0, 0.5])) for a in act],
                      "params": draw(st.sampled_from([0.0, 0.5]))}
    limited = load_instance(data)
    need = min_memory_limit(limited)
    return limited.with_(limit=[x + draw(st.sampled_from([0, 0.5, 1, 2, 3])) for x in need])


# Two replicas whose optimum runs a W inside a pair (the fused backward of (3, 1), with
# F(0, 2)) before the W of (3, 3), whose I ran first: Ws sorted on their own (a W chain)
# cost 0.5 (found by a scratch search for this test's kind of instance).
W_FOLLOWS_I = {"devices": 2, "microbatches": 4, "replicas": 2,
               "times": {"F": 1, "I": [1, 3], "W": [3, 2]},
               "memory": {"activation": [1, 2], "params": 0.5, "limit": [4, 6]},
               "overlap": {"FB": 0.5}}


def test_ws_a_pair_may_absorb_keep_no_order_of_their_own():
    inst = load_instance(W_FOLLOWS_I)
    graph = TaskGraph(inst)
    assert graph.absorbable == {0, 1, 2, 3}
    assert graph.same_class_prev(Op("W", 3, 3)) is None
    assert graph.same_class_prev(Op("I", 3, 3)) == Op("I", 3, 1)
    assert blind_optimum(inst, "makespan") == optimum(inst, "makespan") == pytest.approx(18.0)
    assert blind_solve(inst, "makespan", ordered=True)[0] == pytest.approx(18.0)
    built = TaskGraph.__init__

    def with_w_chains(self, *args, **kw):
        built(self, *args, **kw)
        self.absorbable = frozenset()

    with mock.patch.object(TaskGraph, "__init__", with_w_chains):
        assert optimum(inst, "makespan") == pytest.approx(18.5)  # the W chain's cost


# three microbatches, found by a scratch search with each wrong version in place: the memory
# end bound with the work counted whole (81.5 against the optimum 81), and the model's memory
# precedences on start + duration where a pair ends its I early (61.6 against 61.4)
PAIRS_UNDER_A_LIMIT = [
    {"devices": 2, "microbatches": 3, "chunks": 2, "placement": "loop",
     "times": {"F": [1, 3, 5, 4], "I": [4, 3, 4, 3], "W": [5, 2, 5, 2]}, "comm": 1,
     "memory": {"activation": [1, 2, 1, 2], "weight": [0, 0, 0.5, 1], "limit": [3, 6]},
     "overlap": {"FB": 0.5}},
    {"devices": 2, "microbatches": 3, "chunks": 2, "placement": "v",
     "times": {"F": [1, 1, 3, 2], "I": [3, 3, 5, 2], "W": [5, 1, 5, 2]}, "comm": 1,
     "memory": {"activation": [2, 2, 2, 1], "weight": [0, 1, 1, 0.5], "limit": [6, 8],
                "params": 0.5},
     "overlap": {"FB": 0.8}}]


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_overlapped_limited(), st.sampled_from(["makespan", "span"]))
@example(load_instance(NO_ROOM_TO_PAIR), "makespan")
@example(load_instance(W_FOLLOWS_I), "makespan")
def test_bound_with_overlapped_pairs_under_a_limit_keeps_the_optimum(inst, objective):
    bound_and_model_agree_with_the_oracle(inst, objective)


@pytest.mark.parametrize("data, best", list(zip(PAIRS_UNDER_A_LIMIT, (81.0, 61.4))))
def test_pairs_under_a_limit_keep_their_proven_optimum(data, best):
    """The oracle's checks on the two instances above, with the optimum ``blind_solve`` proves
    pinned (it takes 11-16 s each): the bound stays below it, the ordered heads and tails hold
    in a schedule of it (microbatch order), and the solver's model keeps it."""
    inst = load_instance(data)
    assert analytic_bound(inst, "makespan") <= best + 1e-9
    in_order, start, end = blind_solve(inst, "makespan", ordered=True)
    assert in_order == pytest.approx(best)
    heads_and_tails_hold(inst, start, end, ordered=True)
    assert optimum(inst, "makespan") == pytest.approx(best)
