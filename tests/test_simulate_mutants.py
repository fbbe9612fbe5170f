"""Behaviour tests that kill the simulator's mutants (results/mutation/README.md, part 2):
exact figures of a small run, and every rejection with its exact message."""

from __future__ import annotations

import pytest
from conftest import make_instance

from zbsolve.baselines import generate
from zbsolve.baselines.classic import one_f_one_b
from zbsolve.graph import TaskGraph
from zbsolve.instance import load_instance
from zbsolve.ops import Op, Pair, parse_op
from zbsolve.schedule import Schedule
from zbsolve.simulate import Lanes, ScheduleError, allocates, lanes, simulate, validate


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


# ------------------------------------------------- memory modes: streams, lanes, row-order waits
def _ops(text):
    return [parse_op(t) for t in text.split()]


OFFLOAD = {"fraction": 1.0, "d2h": 1.0}


def test_allocating_jobs_are_the_forwards_recomputes_and_loads():
    assert [allocates(op) for op in _ops("0F0 0R0 0RS0 0L0 0I0 0W0 0B0 0O0")] == [
        True, True, True, True, False, False, False, False]
    assert allocates(Pair(Op("F", 0, 1), Op("B", 1, 0)))
    assert not allocates(Pair(Op("I", 0, 1), Op("F", 1, 0)))


def test_lanes_split_a_row_into_its_streams_with_the_row_order_waits():
    """One device, units 0 and 1 offloaded, 2 recomputed. Every allocating job written after
    0O0 waits for it (0F1, 0F2, 0R2, then 0L0 and 0L1 for 0O1, the copy out written last before
    them); a load also waits for the compute job written before it (0W2 for 0L0, 0I0 for 0L1)."""
    inst = make_instance(p=1, m=3, recompute={"R": 0.5, "kept": 0.25},
                         offload={**OFFLOAD, "streams": 2})
    row = _ops("0F0 0O0 0F1 0F2 0O1 0R2 0I2 0W2 0L0 0I0 0L1 0W0 0I1 0W1")
    graph = TaskGraph.of(inst, row)
    split = lanes(graph, Schedule([row]))
    assert split.rows == [_ops("0F0 0F1 0F2 0R2 0I2 0W2 0I0 0W0 0I1 0W1"), _ops("0O0 0O1"),
                          _ops("0L0 0L1")]
    assert split.where == [(0, 0), (0, 1), (0, 2)]
    assert split.waits_for == {Op("F", 0, 1): [Op("O", 0, 0)], Op("F", 0, 2): [Op("O", 0, 0)],
                               Op("R", 0, 2): [Op("O", 0, 1)],
                               Op("L", 0, 0): [Op("O", 0, 1), Op("W", 0, 2)],
                               Op("L", 0, 1): [Op("O", 0, 1), Op("I", 0, 0)]}
    one = lanes(TaskGraph.of(make_instance(p=1, m=3, offload=OFFLOAD), _ops("0F0 0O0 0L0 0I0")),
                Schedule([_ops("0F0 0O0 0L0 0I0")]))
    assert one.rows == [_ops("0F0 0I0"), _ops("0O0 0L0")] and one.where == [(0, 0), (0, 1)]
    keep = make_instance(p=2, m=1)
    rows = [_ops("0F0 0I0 0W0"), _ops("1F0 1I0 1W0")]
    plain = lanes(TaskGraph.of(keep, [o for r in rows for o in r]), Schedule(rows))
    assert plain == Lanes(rows, [(0, 0), (1, 0)], {})


def test_two_copy_streams_keep_the_lanes_in_stream_order():
    """A load written before the copy out it needs (two streams: they do not share a lane):
    the copy-out lane still comes first in the split. The simulator refuses that row, as the
    runtime (it issues a device's copies in row order) and the P2P check do; written after
    its copy out, the load waits for it and for the compute job before it."""
    inst = make_instance(p=1, m=1, F=1, I=1, W=1, offload={**OFFLOAD, "streams": 2})
    row = _ops("0F0 0L0 0O0 0I0 0W0")
    split = lanes(TaskGraph.of(inst, row), Schedule([row]))
    assert split.rows == [_ops("0F0 0I0 0W0"), _ops("0O0"), _ops("0L0")]
    assert split.where == [(0, 0), (0, 1), (0, 2)]
    assert split.waits_for == {Op("L", 0, 0): [Op("F", 0, 0)]}
    assert _error(inst, [row]) == ("device 0 position 1: 0L0 comes before its input 0O0 (a "
                                   "device issues its copies in row order)")
    row = _ops("0F0 0O0 0L0 0I0 0W0")
    r = simulate(inst, Schedule([row]))
    # F0 0-1, O0 1-2, L0 2-3 (after O0 and F0), I0 3-4, W0 4-5
    assert [(r.start[op], r.end[op]) for op in row] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]


def test_offload_timeline_busy_and_span_are_the_compute_streams():
    """p=1, m=2, offload of both units (d2h 1), F=I=W=1, one copy stream:
    0F0 0-1; 0O0 1-2 (after 0F0); 0F1 is written after 0O0, so it waits for it: 2-3;
    0O1 3-4; 0L0 waits for 0O1 (written before it) and 0F1: 4-5; 0I0 5-6, 0W0 6-7;
    0L1 waits for 0O1 and 0I0 (the compute job before it): 6-7; 0I1 7-8, 0W1 8-9.
    Memory (weight 0, so each unit holds 1 from F's start to O's end and from L's start to
    I's end): 1 at 0, 0O0 frees and 0F1 allocates at 2, 0O1 frees and 0L0 allocates at 4, 0I0
    frees and 0L1 allocates at 6, 0I1 frees at 8."""
    inst = make_instance(p=1, m=2, F=1, I=1, W=1, offload=OFFLOAD)
    row = _ops("0F0 0O0 0F1 0O1 0L0 0I0 0L1 0W0 0I1 0W1")
    r = simulate(inst, Schedule([row]))
    assert [(r.start[op], r.end[op]) for op in row] == [
        (0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (6, 7), (7, 8), (8, 9)]
    assert r.makespan == 9 and r.busy == [6] and r.idle == [3] and r.span == [9]
    assert r.bubble_makespan == 1 - 6 / 9
    assert r.memory_curve == [[(0.0, 0.0), (0.0, 1.0), (2.0, 0.0), (2.0, 1.0), (4.0, 0.0),
                               (4.0, 1.0), (6.0, 0.0), (6.0, 1.0), (8.0, 0.0)]]
    assert r.peak_memory == [1.0] and r.pipeline_end == 9.0


def test_a_deadlock_across_streams_names_what_each_lane_needs_and_waits_for():
    """Two copy streams, 0L0 written after 0I0 (which needs it) and after 0O1: 0I0 waits for
    0L0; 0L0 for 0O1 and 0I0 (written before it); 0O1 needs 0F1, which is behind 0I0 on the
    compute stream (0O0, before it in the copy-out lane, has run)."""
    inst = make_instance(p=1, m=2, F=1, I=1, W=1, offload={**OFFLOAD, "streams": 2})
    row = _ops("0F0 0I0 0O0 0O1 0L0 0F1 0L1 0W0 0I1 0W1")
    assert _error(inst, [row]) == (
        "deadlock: device 0 waits at position 1 on 0I0, which needs 0L0 (device 0); "
        "device 0 copy stream waits at position 1 on 0O1, which needs 0F1 (device 0); "
        "device 0 copy stream waits at position 0 on 0L0, which waits for 0O1, 0I0 written "
        "before it")


@pytest.mark.parametrize("row, message", [
    ("0F0 0I0 0R0 0W0", "device 0 position 1: 0I0 comes before its input 0R0 (row order is the "
                        "order a stream runs its jobs in)"),
    ("0F0 0I0 0RS0 0W0", "device 0 position 1: 0I0 comes before its input 0RS0 (row order is "
                         "the order a stream runs its jobs in)"),
    ("0F0 0L0 0O0 0I0 0W0", "device 0 position 1: 0L0 comes before its input 0O0 (row order is "
                            "the order a stream runs its jobs in)"),
    ("0F0 0W0 0I0", "device 0 position 1: 0W0 comes before its input backward 0I0"),
])
def test_a_job_before_its_own_units_input_on_its_stream_is_named(row, message):
    inst = make_instance(p=1, m=1, offload=OFFLOAD,
                         recompute={"R": 0.5, "kept": 0.25, "R_selective": 0.25,
                                    "kept_selective": 0.5})
    assert _error(inst, [_ops(row)]) == message


def test_a_unit_with_two_modes_is_a_schedule_error():
    inst = make_instance(p=1, m=1, offload=OFFLOAD, recompute={"R": 0.5, "kept": 0.25})
    assert _error(inst, [_ops("0F0 0R0 0O0 0L0 0I0 0W0")]) == (
        "unit (stage 0, microbatch 0) runs both recompute and offload (0O0); a unit has one "
        "memory mode")


# ------------------------------------------------------------ the step boundary's tail rule
def test_optimizer_steps_run_after_the_row_earliest_ready_first():
    """p=1, v=2, m=1, unit times, post-validation, optimizer 1 each, allreduce [2, 0]:
    0F0 0-1, 1F0 1-2, 1I0 2-3, 1W0 3-4, 0I0 4-5, 0W0 5-6. AR(1) 4-4, AR(0) 6-8. The device's
    row ends at 6: OPT(1) (ready at 4) 6-7, then OPT(0) waits for its release 8: 8-9.
    NORM(0) 8, NORM(1) 8. Makespan 9, span 9, busy 6 + 2, the boundary 9 - 6."""
    inst = make_instance(p=1, m=1, v=2, step={"mode": "post-validation", "optimizer": 1,
                                              "allreduce": [2, 0]})
    row = _ops("0F0 1F0 1I0 1W0 0I0 0W0")
    r = simulate(inst, Schedule([row]))
    tails = [(op, r.start[op], r.end[op]) for op in (Op("OPT", 1, -1), Op("OPT", 0, -1))]
    assert tails == [(Op("OPT", 1, -1), 6.0, 7.0), (Op("OPT", 0, -1), 8.0, 9.0)]
    assert r.makespan == 9.0 and r.span == [9.0] and r.busy == [8.0] and r.idle == [1.0]
    assert r.pipeline_end == 6.0 and r.step_mode == "post-validation"
    assert r.summary()["step"] == r.step_summary() == {
        "mode": "post-validation", "pipeline_end": 6.0, "boundary": 3.0}
    assert r.bubble_span == r.bubble_makespan == 1 - 8 / 9


def test_optimizer_steps_ready_together_run_lower_stage_first():
    """Sync, optimizer [2, 1]: CHECK (1) after both AR (0) at 6, 6-7; both OPT ready at 7:
    OPT(0) 7-9, then OPT(1) 9-10."""
    inst = make_instance(p=1, m=1, v=2, step={"mode": "sync", "optimizer": [2, 1], "check": 1})
    r = simulate(inst, Schedule([_ops("0F0 1F0 1I0 1W0 0I0 0W0")]))
    assert [(r.start[Op("OPT", s, -1)], r.end[Op("OPT", s, -1)]) for s in (0, 1)] == [
        (7.0, 9.0), (9.0, 10.0)]
    assert r.makespan == 10.0 and r.busy == [9.0]


def test_step_jobs_are_not_listed_and_not_counted_as_missing():
    inst = make_instance(p=2, m=1, step={"mode": "sync", "optimizer": 1})
    rows = [_ops("0F0 0I0 0W0"), _ops("1F0 1I0 1W0")]
    assert simulate(inst, Schedule(rows)).makespan == 6.0
    assert _error(inst, [rows[0] + [Op("OPT", 0, -1)], rows[1]]) == (
        "device 0: 0OPT is a step-boundary job; schedules do not list them (reductions run on no "
        "device, every device runs its optimizer steps after its last job: zbsolve.graph, the "
        "tail rule)")
    assert _error(inst, [rows[0][:2], rows[1]]) == "1 missing op(s): 0W0"


def test_without_a_step_the_pipeline_end_is_the_makespan():
    _, r = _small()
    assert r.step_mode == "none" and r.pipeline_end == 11.0
    assert r.step_summary() == {"mode": "none", "pipeline_end": 11.0, "boundary": 0.0}


def test_the_norm_hand_off_between_devices_waits_for_comm():
    """p=2, m=1, unit times, fused backward (1F1B), comm 1, post-validation, optimizer 0.5,
    allreduce 0: 0F0 0-1, 1F0 2-3, 1B0 3-5, 0B0 6-8. AR(1) 5, AR(0) 8; NORM(0) 8, NORM(1)
    waits for NORM(0) + comm: 9. OPT(1) 5-5.5, OPT(0) 8-8.5. The makespan is NORM(1)'s end;
    the spans end at each device's OPT."""
    inst = make_instance(p=2, m=1, comm=1.0, step={"mode": "post-validation",
                                                   "optimizer": 0.5})
    r = simulate(inst, one_f_one_b(inst))
    assert (r.end[Op("NORM", 0, -1)], r.end[Op("NORM", 1, -1)]) == (8.0, 9.0)
    assert (r.start[Op("OPT", 1, -1)], r.end[Op("OPT", 0, -1)]) == (5.0, 8.5)
    assert r.makespan == 9.0 and r.span == [8.5, 3.5] and r.pipeline_end == 8.0
    assert r.busy == [3.5, 3.5]  # F, B and the device's own OPT
