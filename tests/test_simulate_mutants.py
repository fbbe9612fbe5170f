"""Behaviour tests that kill the simulator's mutants (results/mutation/README.md, part 2):
exact figures of a small run, and every rejection with its exact message."""

from __future__ import annotations

import pytest
from conftest import make_instance

from zbsolve.baselines import generate
from zbsolve.baselines.classic import one_f_one_b
from zbsolve.instance import load_instance
from zbsolve.ops import Op, Pair
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate, validate


def _error(inst, orders) -> str:
    with pytest.raises(ScheduleError) as err:
        simulate(inst, Schedule(orders))
    return str(err.value)


def _small():
    """p=2, m=3, fused backward of 2, comm 0.25, limit 3: every figure below worked by hand."""
    inst = make_instance(p=2, m=3, F=1, I=1, W=0.5, comm=0.25, activation=1.0, weight=0.5, limit=3)
    return inst, simulate(inst, one_f_one_b(inst))


def test_summary_and_objectives_are_the_simulators_figures():
    _, r = _small()
    assert r.summary() == {
        "makespan": 11.0, "span": 11.0,
        "bubble_makespan": 1 - 15 / 22, "bubble_span": 1 - 15 / 22,
        "peak_memory": [2.0, 1.0], "memory_limit": [3.0, 3.0], "feasible": True,
        "idle": [3.5, 3.5],
    }
    assert r.span == [11.0, 8.0] and r.max_span == 11.0
    assert r.busy == [7.5, 7.5]
    assert r.value("makespan") == 11.0
    assert r.value("span") == 11.0
    with pytest.raises(ValueError) as err:
        r.value("bubble")
    assert str(err.value) == "objective: expected one of ('makespan', 'span'), got 'bubble'"


def test_span_objective_differs_from_makespan():
    """Device 1 starts after the hand-off and ends last: the longest span is below the makespan."""
    inst = make_instance(p=2, m=1, F=1, I=1, W=[0.5, 10], comm=0.5)
    r = simulate(inst, Schedule([[Op("F", 0, 0), Op("I", 0, 0), Op("W", 0, 0)],
                                 [Op("F", 1, 0), Op("I", 1, 0), Op("W", 1, 0)]]))
    assert r.makespan == 13.5
    assert r.span == [5.5, 12.0]
    assert r.value("span") == r.max_span == 12.0
    assert r.value("makespan") == 13.5
    assert r.bubble_span == 1 - 14.5 / 24
    assert r.bubble_makespan == 1 - 14.5 / 27


def test_memory_curve_peak_time_and_frees_before_allocations():
    """At t=5.5 device 0 frees 0B0's activation as 0F2 allocates: with the free first the
    memory never passes 2, so a limit of 2 holds; the peak stays at its first time (t=1)."""
    inst = make_instance(p=2, m=3, F=1, I=1, W=0.5, comm=0.25, activation=1.0, weight=0.5, limit=2)
    r = simulate(inst, one_f_one_b(inst))
    assert r.memory_curve == [
        [(0.0, 0.0), (0.0, 1.0), (1.0, 2.0), (5.5, 1.0), (5.5, 2.0), (8.0, 1.0), (11.0, 0.0)],
        [(0.0, 0.0), (1.25, 1.0), (3.75, 0.0), (3.75, 1.0), (6.25, 0.0), (6.75, 1.0), (9.25, 0.0)]]
    assert r.peak_memory == [2.0, 1.0]
    assert r.peak_time == [1.0, 1.25]
    assert r.feasible and r.violations == [] and r.limit == [2.0, 2.0]


def test_resident_params_start_the_curve_and_count_in_the_peak():
    inst = make_instance(p=1, m=1, F=1, I=1, W=1, activation=1.0, weight=0.5,
                         memory={"activation": 1.0, "weight": 0.5, "params": 0.25})
    r = simulate(inst, Schedule([[Op("F", 0, 0), Op("I", 0, 0), Op("W", 0, 0)]]))
    assert r.memory_curve == [[(0.0, 0.25), (0.0, 0.75), (0.0, 1.25), (2.0, 0.75), (3.0, 0.25)]]
    assert r.peak_memory == [1.25] and r.peak_time == [0.0]


def test_fractional_overshoot_is_a_violation_with_its_figures():
    inst = make_instance(p=2, m=3, F=1, I=1, W=0.5, comm=0.25, activation=1.0, weight=0.5,
                         limit=[1.75, 2])
    r = simulate(inst, one_f_one_b(inst))
    assert r.violations == ["device 0 exceeds its memory limit 1.75: reaches 2 at t=1 when 0F1 "
                            "starts (over by 0.25); its peak is 2"]
    assert not r.feasible
    with pytest.raises(ScheduleError) as err:
        validate(inst, one_f_one_b(inst))
    assert str(err.value) == r.violations[0]


def test_violations_of_two_devices_are_joined():
    inst = make_instance(p=2, m=3, F=1, I=1, W=0.5, comm=0.25, activation=1.0, limit=0.5)
    with pytest.raises(ScheduleError) as err:
        validate(inst, one_f_one_b(inst))
    assert str(err.value) == (
        "device 0 exceeds its memory limit 0.5: reaches 1 at t=0 when 0F0 starts (over by 0.5); "
        "its peak is 2; device 1 exceeds its memory limit 0.5: reaches 1 at t=1.25 when 1F0 "
        "starts (over by 0.5); its peak is 1")


# ---------------------------------------------------------------- rejections, exact messages
def _split(inst):
    """1F1B with every fused B split into I then W."""
    return [[x for o in row for x in
             ([Op("I", o.stage, o.mb), Op("W", o.stage, o.mb)] if o.kind == "B" else [o])]
            for row in one_f_one_b(inst).orders]


M12 = make_instance(p=2, m=12)
W_TEN = "0W0, 0W1, 0W2, 0W3, 0W4, 0W5, 0W6, 0W7, 0W8, 0W9"


def _added(*ops):
    orders = _split(M12)
    orders[0] += list(ops)
    return orders


def _without_w(k):
    orders = _split(M12)
    orders[0] = [x for x in orders[0] if not (x.kind == "W" and x.mb < k)]
    return orders


RANGE12 = "on device 0 is out of range: stages 0..1, microbatches 0..11"
REJECTED = {
    "eleven duplicates: ten named, then ...": (
        lambda: _added(*(Op("F", 0, j) for j in range(11))),
        "duplicate op(s): 0F0, 0F1, 0F10, 0F2, 0F3, 0F4, 0F5, 0F6, 0F7, 0F8 ..."),
    "ten duplicates: all named": (
        lambda: _added(*(Op("F", 0, j) for j in range(10))),
        "duplicate op(s): 0F0, 0F1, 0F2, 0F3, 0F4, 0F5, 0F6, 0F7, 0F8, 0F9"),
    "eleven missing": (lambda: _without_w(11), f"11 missing op(s): {W_TEN} ..."),
    "ten missing": (lambda: _without_w(10), f"10 missing op(s): {W_TEN}"),
    "unknown kind": (lambda: _added(Op("X", 0, 0)), "device 0: 0X0 is not an op kind a device runs"),
    "microbatch past the last": (lambda: _added(Op("F", 0, 12)), f"op 0F12 {RANGE12}"),
    "negative microbatch": (lambda: _added(Op("F", 0, -1)), f"op 0F {RANGE12}"),
    "stage past the last": (lambda: _added(Op("F", 2, 0)), f"op 2F0 {RANGE12}"),
    "negative stage": (lambda: _added(Op("F", -1, 0)), f"op -1F0 {RANGE12}"),
    "a segment without segments": (lambda: _added(Op("F", 0, 0, 1)), f"op 0F0.1 {RANGE12}"),
    "negative segment": (lambda: _added(Op("F", 0, 0, -1)), f"op 0F0.-1 {RANGE12}"),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_structural_rejections_exact(case):
    make, message = REJECTED[case]
    assert _error(M12, make()) == message


def test_both_fused_and_split_are_named():
    orders = _split(M12)
    orders[0] += [Op("B", 0, 11)]
    orders[1] += [Op("B", 1, 3)]
    assert _error(M12, orders) == "backward run both fused (B) and split (I/W): 0B11, 1B3"


def test_segment_out_of_range_names_the_segments():
    inst = load_instance(dict(devices=2, microbatches=2, segments=2, times=dict(F=1, I=1, W=1)))
    orders = [list(r) for r in generate("seq1f1b", inst).orders]
    orders[0].append(Op("F", 0, 0, 2))
    assert _error(inst, orders) == ("op 0F0.2 on device 0 is out of range: stages 0..1, "
                                    "microbatches 0..1, segments 0..1")
    assert simulate(inst, generate("seq1f1b", inst)).makespan == 7.5  # (2m + p - 1)(F + B) / 2


REPLICATED = load_instance({"devices": 2, "microbatches": 4, "replicas": 2, "sync": 2.0,
                            "times": {"F": 1, "I": 0.5, "W": 0.5}})


def test_replicas_sync_and_microbatch_ownership():
    orders = [list(r) for r in generate("chimera", REPLICATED).orders]
    r = simulate(REPLICATED, Schedule(orders))
    sync = {op.stage: (r.start[op], r.end[op]) for op in r.start if op.kind == "SYNC"}
    assert sync == {0: (8.0, 10.0), 1: (7.0, 9.0)}
    assert r.makespan == 10.0 and r.span == [8.0, 8.0] and r.busy == [8.0, 8.0]
    assert r.bubble_makespan == 1 - 16 / 20 and r.bubble_span == 0.0
    listed = [orders[0] + [Op("SYNC", 0, -1)], orders[1]]
    assert _error(REPLICATED, listed) == ("device 0: 0SYNC is the replicas' all-reduce; it runs on "
                                          "no device, so schedules do not list it")
    wrong = [orders[0], [Op("F", 2, 2)] + orders[1][1:]]  # device 1 starts with 2F1
    assert orders[1][0] == Op("F", 2, 1)
    assert _error(REPLICATED, wrong) == ("op 2F2 on device 1: stage 2 is replica 1's copy, which "
                                         "runs microbatches j with j mod 2 = 1")


V_PAIRS = {"devices": 2, "microbatches": 4, "chunks": 2, "placement": "v",
           "times": {"F": 1, "I": 1, "W": 1}}


def test_overlapped_pairs_run_as_one_job_or_are_refused_with_the_reason():
    inst = load_instance({**V_PAIRS, "overlap": {"FB": 0.75}})
    orders = [list(r) for r in generate("dualpipev", inst).orders]
    r = simulate(inst, Schedule(orders))
    assert r.makespan == 23.0 and r.busy == [21.75, 21.75]
    first = orders[0][7]
    assert first == Pair(Op("F", 0, 3), Op("B", 3, 1))
    assert r.end[first.first] - r.start[first.first] == 0.75 * 3
    assert r.start[first.first] == r.start[first.second]
    assert _error(load_instance(V_PAIRS), orders) == (
        "device 0: (0F3;3B1) cannot run overlapped: the instance allows no overlapped F&B "
        "(set overlap: {FB: x})")
    assert _error(load_instance({**V_PAIRS, "overlap": {"FB": [[0, 3, 0.8]]}}), orders) == (
        "device 0: (3F2;0B0) cannot run overlapped: the instance's overlap table has no factor "
        "for forward stage 3 with backward stage 0 on one device")
    for bad, why in ((Pair(Op("I", 0, 1), Op("F", 0, 0)), "a pair is a forward then an I or B"),
                     (Pair(Op("F", 0, 0), Op("W", 3, 1)), "a pair is a forward then an I or B"),
                     (Pair(Op("F", 0, 1), Op("I", 3, 1)),
                      "its two halves belong to the same microbatch")):
        assert _error(inst, [orders[0] + [bad], orders[1]]) == (
            f"device 0: {bad} cannot run overlapped: {why}")


def test_a_w_before_its_i_is_named_before_the_deadlock():
    """Device 1 runs 1I0 1W0 in order, then 1W1 before 1I1: the second pair is named."""
    orders = _split(make_instance(p=2, m=2))
    i, w = orders[1].index(Op("I", 1, 1)), orders[1].index(Op("W", 1, 1))
    assert orders[1].index(Op("W", 1, 0)) < w
    orders[1][i], orders[1][w] = orders[1][w], orders[1][i]
    assert _error(make_instance(p=2, m=2), orders) == (
        f"device 1 position {i}: 1W1 comes before its input backward 1I1")


def test_a_deadlock_lists_only_the_blocked_devices():
    inst = make_instance(p=3, m=1)
    orders = [[Op("F", 0, 0), Op("B", 0, 0)], [Op("B", 1, 0), Op("F", 1, 0)],
              [Op("F", 2, 0), Op("B", 2, 0)]]
    assert _error(inst, orders) == (
        "deadlock: device 0 waits at position 1 on 0B0, which needs 1B0 (device 1); "
        "device 1 waits at position 0 on 1B0, which needs 2B0 (device 2); "
        "device 2 waits at position 0 on 2F0, which needs 1F0 (device 1)")


def test_frees_go_first_even_when_listed_after_the_allocation():
    """One device, two stages: at t=4 1B0 frees while 0F1 allocates; 0F1's unit is listed
    first, yet the free is counted first, so the peak stays 2 (a limit of 2 holds)."""
    inst = make_instance(p=1, m=2, v=2, activation=1.0, limit=2)
    order = [Op("F", 0, 0), Op("F", 1, 0), Op("B", 1, 0), Op("F", 0, 1), Op("B", 0, 0),
             Op("F", 1, 1), Op("B", 1, 1), Op("B", 0, 1)]
    r = simulate(inst, Schedule([order]))
    assert r.memory_curve == [[(0.0, 0.0), (0.0, 1.0), (1.0, 2.0), (4.0, 1.0), (4.0, 2.0),
                               (7.0, 1.0), (7.0, 2.0), (10.0, 1.0), (12.0, 0.0)]]
    assert r.peak_memory == [2.0] and r.peak_time == [1.0] and r.feasible


def test_events_of_one_instant_keep_the_graphs_order():
    """At F's start the activation-minus-weight piece (0.75) is counted before the weight
    piece (0.25): the curve keeps the lifetimes' order, not the amounts'."""
    inst = make_instance(p=1, m=1, F=1, I=1, W=1,
                         memory={"activation": 1.0, "weight": 0.25, "params": 0.5})
    r = simulate(inst, Schedule([[Op("F", 0, 0), Op("I", 0, 0), Op("W", 0, 0)]]))
    assert r.memory_curve == [[(0.0, 0.5), (0.0, 1.25), (0.0, 1.5), (2.0, 0.75), (3.0, 0.5)]]


def test_a_peak_reached_again_within_rounding_keeps_its_first_time():
    """The same peak three times, the later ones higher by 3e-10 and 5e-10 (rounding of
    1.4e6-sized sums): relative tolerance 1e-9 keeps the first time."""
    a, w = [1029209.9, 380640.0], [791063.2, 169846.8]
    inst = make_instance(p=1, m=3, v=2, activation=a, weight=w)
    order = [op for j in range(3) for op in (Op("F", 0, j), Op("F", 1, j), Op("I", 1, j),
                                             Op("I", 0, j), Op("W", 1, j), Op("W", 0, j))]
    r = simulate(inst, Schedule([order]))
    tops = [t for t, mem in r.memory_curve[0] if mem >= 1409849.9]
    assert tops == [1.0, 7.0, 13.0]
    assert r.peak_time == [1.0]
    assert r.peak_memory[0] == pytest.approx(1409849.9, rel=1e-12)


SEG1 = load_instance(dict(devices=2, microbatches=1, segments=2, times=dict(F=1, I=1, W=1)))


def _seg(kind, stage, seg):
    return Op(kind, stage, 0, seg)


def test_a_deadlock_with_a_finished_device_names_only_the_stuck_one():
    """Segment 0's I needs segment 1's: device 0 has them the wrong way round while device 1
    runs them right and finishes."""
    d0 = [_seg("F", 0, 0), _seg("F", 0, 1), _seg("I", 0, 0), _seg("I", 0, 1), _seg("W", 0, 0),
          _seg("W", 0, 1)]
    d1 = [_seg("F", 1, 0), _seg("F", 1, 1), _seg("I", 1, 1), _seg("I", 1, 0), _seg("W", 1, 1),
          _seg("W", 1, 0)]
    assert _error(SEG1, [d0, d1]) == (
        "deadlock: device 0 waits at position 2 on 0I0, which needs 0I0.1 (device 0)")


def test_a_deadlock_names_every_missing_input():
    d0 = [_seg("F", 0, 0), _seg("F", 0, 1), _seg("I", 0, 1), _seg("I", 0, 0), _seg("W", 0, 0),
          _seg("W", 0, 1)]
    d1 = [_seg("I", 1, 0), _seg("F", 1, 0), _seg("F", 1, 1), _seg("I", 1, 1), _seg("W", 1, 1),
          _seg("W", 1, 0)]
    assert _error(SEG1, [d0, d1]) == (
        "deadlock: device 0 waits at position 2 on 0I0.1, which needs 1I0.1 (device 1); "
        "device 1 waits at position 0 on 1I0, which needs 1F0 (device 1), 1I0.1 (device 1)")


@pytest.mark.parametrize("kept", ["I", "W"])
def test_a_fused_b_with_only_one_split_half_is_named(kept):
    orders = _split(M12)
    drop = {"I": Op("W", 0, 11), "W": Op("I", 0, 11)}[kept]
    orders[0] = [x for x in orders[0] if x != drop] + [Op("B", 0, 11)]
    assert _error(M12, orders) == "backward run both fused (B) and split (I/W): 0B11"


def test_a_pair_waits_for_its_second_ops_input():
    """Device 1 runs (1F1;2B0): 1F1's input 0F1 ends at 2, 2B0's input 3B0 only at 6, so the
    pair starts at 6 (not at 3, when device 1 is free) and ends at 6 + 0.75 * (1 + 2) = 8.25.
    Device 0: 0F0 0-1, 0F1 1-2, 3F0 3-4 (after 2F0 2-3), 3B0 4-6."""
    inst = load_instance({**V_PAIRS, "microbatches": 2, "overlap": {"FB": 0.75}})
    F, B = (lambda s, j: Op("F", s, j)), (lambda s, j: Op("B", s, j))
    orders = [[F(0, 0), F(0, 1), F(3, 0), B(3, 0), F(3, 1), B(3, 1), B(0, 0), B(0, 1)],
              [F(1, 0), F(2, 0), Pair(F(1, 1), B(2, 0)), F(2, 1), B(2, 1), B(1, 0), B(1, 1)]]
    r = simulate(inst, Schedule(orders))
    assert (r.end[F(0, 1)], r.end[B(3, 0)]) == (2.0, 6.0)
    assert [(r.start[op], r.end[op]) for op in (F(1, 1), B(2, 0))] == [(6.0, 8.25)] * 2
    # then 2F1 8.25-9.25, 3F1 9.25-10.25, 3B1 -12.25, 2B1 -14.25, 1B0 -16.25, 0B0 -18.25, 0B1 -20.25
    assert r.makespan == 20.25
