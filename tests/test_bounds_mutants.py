"""Behaviour tests that kill ``solver/bounds.py``'s mutants (results/mutation/README.md, part 3):
bound values pinned on small instances, each worked out by hand in a comment, and the helpers'
exact results. No CP-SAT here (mutmut runs these against every mutant); the bounds' validity
against proven optima is ``test_bounds.py``."""

from __future__ import annotations

import pytest
from conftest import make_instance

from zbsolve.graph import TaskGraph
from zbsolve.instance import load_instance
from zbsolve.ops import Op
from zbsolve.solver import bounds
from zbsolve.solver.bounds import InfeasibleMemoryError, check_memory, critical_path, min_memory_limit

# loop placement, p=2, v=2: device 0 holds stages 0 and 2, device 1 holds 1 and 3
FOUR = dict(activation=[1, 2, 3, 4], weight=[0.25, 0.5, 0.75, 1])


def test_critical_path_is_the_longest_chain_with_its_delays():
    # p=2, m=1, all ops 1, comm 0.5: F0 -0.5-> F1 -> I1 -0.5-> I0 -> W0: 1+0.5+1+1+0.5+1+1 = 6
    assert critical_path(make_instance(p=2, m=1, comm=0.5)) == 6.0


# ---------------------------------------------------------------- memory
def test_min_memory_limit_sums_a_devices_activations_on_top_of_its_params():
    inst = make_instance(p=2, m=2, v=2, memory={**FOUR, "params": [0.5, 0, 0.25, 0]})
    # device 0: params 0.5 + 0.25, activations 1 + 3; device 1: 2 + 4
    assert min_memory_limit(inst) == [4.75, 6.0]
    assert check_memory(inst) == [4.75, 6.0]  # no limit: fits


def test_too_small_limits_are_named_with_every_devices_minimum():
    inst = make_instance(p=2, m=2, v=2, memory={**FOUR, "params": [0.5, 0, 0.25, 0],
                                                 "limit": [1, 6]})
    with pytest.raises(InfeasibleMemoryError) as err:
        check_memory(inst)
    assert str(err.value) == (
        "memory.limit: no schedule fits (device 0: limit 1 < 4.75). Every schedule holds the "
        "weights of its stages (memory.params) and one activation of each stage of a device at "
        "once; set memory.limit to at least [4.75, 6.0] (per device); or offer recompute: "
        "{R, kept} / offload: {fraction, d2h}, which lower it to one live activation plus what "
        "they keep of the other stages")
    assert err.value.min_limit == [4.75, 6.0]
    assert check_memory(inst.with_(limit=[4.75, 6])) == [4.75, 6.0]  # exactly the minimum fits


def test_too_small_limit_without_params_or_with_one_stage_per_device():
    with pytest.raises(InfeasibleMemoryError) as err:
        check_memory(make_instance(p=2, m=2, activation=2, limit=[1, 3]))
    assert str(err.value) == (
        "memory.limit: no schedule fits (device 0: limit 1 < 2). Every schedule holds one "
        "activation of each stage of a device at once; set memory.limit to at least [2.0, 2.0] "
        "(per device)")


def test_recompute_lowers_the_minimum_to_one_live_activation_plus_what_it_keeps():
    # device 0: stage 0 live (1), then stage 2 live (1) while stage 0 keeps 0.25: 1.25
    inst = make_instance(p=2, m=2, v=2, limit=1, recompute={"R": 0.5, "kept": 0.25})
    assert bounds.cheapest_mode(inst, 0) == "recompute"
    with pytest.raises(InfeasibleMemoryError) as err:
        check_memory(inst)
    assert str(err.value) == (
        "memory.limit: no schedule fits (device 0: limit 1 < 1.25; device 1: limit 1 < 1.25). "
        "Every schedule holds one live activation plus what the cheapest memory mode keeps of "
        "the device's other stages (recompute offered); set memory.limit to at least "
        "[1.25, 1.25] (per device)")


def test_cheapest_mode_keeps_on_a_tie():
    inst = make_instance(p=2, m=2, recompute={"R": 0.5, "kept": 1.0})  # keeps all it has
    assert [bounds.cheapest_mode(inst, s) for s in (0, 1)] == ["keep", "keep"]


# ---------------------------------------------------------------- helpers
def test_knapsack_lp_vertices():
    lp = bounds._knapsack_lp
    assert lp([(2, 3)], -0.1, 4) == 0.0 and lp([(2, 3)], 5, 0) == 0.0
    assert lp([(2, 3)], 5, 4) == 7.5  # x = min(4, 5 / 2) = 2.5
    assert lp([(0, 2)], 1, 3) == 6.0  # costs no memory: x = count
    # max 2 x1 + 4 x2, x1 + 3 x2 <= 6, x1 + x2 <= 3: the pair vertex: x1 = (6 - 3*3) / (1 - 3) = 1.5, x2 = 1.5: 1.5*2 + 1.5*4 = 9,
    # above either item alone (3*2 = 6; min(3, 6/3)*4 = 8)
    assert lp([(1, 2), (3, 4)], 6, 3) == 9.0
    # the pair's vertex has x1 = (10 - 9) / (1 - 3) < 0: not a vertex; item 2 alone: 3*4 = 12
    assert lp([(1, 1), (3, 4)], 10, 3) == 12.0
    assert lp([(2, 1), (2, 3)], 4, 3) == 6.0  # equal memories: no pair vertex; 2*3
    assert lp([], 4, 3) == 0.0
    assert lp([(0, 2)], -1, 3) == 0.0  # no room at all: not even memory-free work counts
    assert lp([(1, 2)], 5, 1) == 2.0  # one microbatch: x = min(1, 5)
    # the pair (0, 2) of four items: 9 (the others add nothing: they do no work)
    assert lp([(1, 2), (5, 0), (3, 4), (6, 0)], 6, 3) == 9.0
    # memories 0.5 apart: max x1 + 3 x2, 0.5 x2 <= 1, x1 + x2 <= 3: x1 = 1, x2 = 2: 7 (> 2 * 3)
    assert lp([(0, 1), (0.5, 3)], 1, 3) == 7.0
    # an equal-memory pair is skipped, the pairs after it are still tried: 9
    assert lp([(1, 2), (1, 1), (3, 4)], 6, 3) == 9.0
    # the pair's vertex has x2 = -0.5 (x1 = 3.5): not a vertex; 3 * 4 = 12, not 3.5 * 4 - 0.5
    assert lp([(3, 4), (1, 1)], 10, 3) == 12.0


def test_pending_states_of_two_stages():
    inst = make_instance(p=2, m=2, v=2, I=[1, 2, 3, 4], W=[0.5, 1, 1.5, 2], memory=FOUR)
    # stages 0 and 2: none waits for I (each may wait for W: weight, W), stage 0 waits for I
    # (activation 1, I + W = 1.5; stage 2 done or waiting for W), or both wait for I
    assert bounds._pending_states(inst, [0, 2]) == [
        (0.0, 0.0, False), (0.25, 0.5, False), (0.75, 1.5, False), (1.0, 2.0, False),
        (1.0, 1.5, False), (1.75, 3.0, False), (4.0, 6.0, True)]


def _tokens(sched):
    return [[str(op) for op in row] for row in sched.orders]


def test_serial_schedule_runs_one_microbatch_at_a_time():
    s = bounds.serial_schedule(make_instance(p=2, m=2))
    assert s.name == "serial"
    assert _tokens(s) == [["0F0", "0I0", "0W0", "0F1", "0I1", "0W1"],
                          ["1F0", "1I0", "1W0", "1F1", "1I1", "1W1"]]


def test_serial_schedule_puts_every_unit_in_its_cheapest_mode():
    # offload keeps 0 of the activation (fraction 1): its copy out O right after the forward,
    # the copy back L before the backward; recompute's R before the backward
    off = bounds.serial_schedule(make_instance(p=2, m=2, offload={"fraction": 1.0, "d2h": 0.5}))
    assert _tokens(off)[0] == ["0F0", "0O0", "0L0", "0I0", "0W0", "0F1", "0O1", "0L1", "0I1", "0W1"]
    rec = bounds.serial_schedule(make_instance(p=2, m=2, recompute={"R": 0.5, "kept": 0.25}))
    assert _tokens(rec)[1] == ["1F0", "1R0", "1I0", "1W0", "1F1", "1R1", "1I1", "1W1"]


def test_device_lower_bounds_are_first_start_plus_work():
    # device 0 starts at 0, device 1 after 0F0 and the hand-off (1 + 0.5); work 2 * (1+1+1) = 6
    assert bounds.device_lower_bounds(make_instance(p=2, m=2, comm=0.5)) == [6.0, 7.5]
    # v=2: each device runs 2 stages * 4 microbatches * 3 = 24; device 1's first op is 1F0 at 1.5
    assert bounds.device_lower_bounds(make_instance(p=2, m=4, v=2, comm=0.5)) == [24.0, 25.5]


def test_min_memory_limit_of_replicas_takes_the_larger_replica():
    # replicas 2, p=2: device 0 holds stage 0 (replica 0, activation 1) and stage 3 (replica 1,
    # logical stage 1: activation 2); they never share a microbatch: max(1, 2) = 2, not 1 + 2
    inst = load_instance({"devices": 2, "microbatches": 2, "replicas": 2,
                          "times": {"F": 1, "I": 1, "W": 1}, "memory": {"activation": [1, 2]}})
    assert [inst.stages_of(d) for d in (0, 1)] == [[0, 3], [1, 2]]
    assert min_memory_limit(inst) == [2.0, 2.0]


def test_min_memory_limit_walks_every_stage_of_a_device():
    # v=3, p=2: device 0 holds stages 0, 2, 4 (activations 1, 1, 1): 3; small activations stay
    # small (0.5 + 0.5 = 1, no unit floor)
    assert min_memory_limit(make_instance(p=2, m=2, v=3)) == [3.0, 3.0]
    assert min_memory_limit(make_instance(p=2, m=2, activation=0.5)) == [0.5, 0.5]
    # recompute keeps 0.25 of stage 0's 4: stage 0 live (4) is the peak, not 0.25 + 1 of stage 2
    inst = make_instance(p=2, m=2, v=2, memory={"activation": [4, 1, 1, 1]},
                         recompute={"R": 0.5, "kept": 0.25})
    assert min_memory_limit(inst) == [4.0, 1.25]


# ---------------------------------------------------------------- per-device bounds
def test_device_tails_count_only_paths_back_to_the_device():
    # p=2, m=1, I = [2, 1], comm 0.5. Device 1: 1F0 -> 1I0 -> 1W0 (1 each): tails 2, 1, 0; the
    # path 1I0 -> 0I0 (0.5 + 2) ends on device 0 and never comes back: it does not count.
    # Device 0: 0F0 -> 1F0 -> 1I0 -> 0I0 -> 0W0: 0.5 + 1 + 1 + 0.5 + 2 + 1 = 6.
    inst = make_instance(p=2, m=1, I=[2, 1], comm=0.5)
    ht = bounds.heads_tails(inst)
    F, I, W = (lambda s: Op("F", s, 0)), (lambda s: Op("I", s, 0)), (lambda s: Op("W", s, 0))
    assert bounds.device_tails(inst, ht, 1) == {F(1): 2.0, I(1): 1.0, W(1): 0.0}
    assert bounds.device_tails(inst, ht, 0) == {F(0): 6.0, I(0): 1.0, W(0): 0.0}
    # makespan: device 0's 0F0 + tail 6 = 7 (the critical path); spans: device 0 the same 7,
    # device 1 its own 3 ops (its tails end on it)
    assert bounds.device_makespan_bounds(inst) == [7.0, 7.0]
    assert bounds.device_span_bounds(inst) == [7.0, 3.0]
    # without the tails the heads alone give it: 0W0 starts at 6 at the earliest, ends at 7
    assert bounds.device_span_bounds(inst, own_tails=False) == [7.0, 3.0]


# ---------------------------------------------------------------- memory_end_bounds
def test_memory_end_bound_of_one_stage_per_device():
    # p=2, m=4, all ops 1, activation 1, limit 2 on both devices (needs 4 to hold every forward).
    # Device 0: h_F = 0, h_I = head of 0I0 = 1F0... 0F0 + 1F0 + 1I0 = 3; at most cap = 2 forwards
    # (x = 2) run before it, so >= 3 - 2 = 1 idle before 3, then all work 4 * 3 = 12: 13. The end
    # window: y = max over n in {0, 1} of n (I + W) + (m - 1 - n) W = max(3, 4) = 4, plus 0F3 and
    # the full state (I + W): 7 >= the chain 0F0..0W0 = 4 + 1 = 5, so it adds nothing.
    # Device 1: h_F = 1, h_I = 2: 2 - min(2, 2 - 1) + 12 = 13.
    assert bounds.memory_end_bounds(make_instance(p=2, m=4, limit=2)) == [13.0, 13.0]
    # device 0 with I = W = 1 and device 1 with I = W = 0.5: device 0 as above but h_I = 2.5:
    # 2.5 - 2 + 12 = 12.5; device 1: 2 - 1 + 4 * 2 = 9
    inst = make_instance(p=2, m=4, I=[1, 0.5], W=[1, 0.5], limit=2)
    assert bounds.memory_end_bounds(inst) == [12.5, 9.0]
    assert bounds.analytic_bound(inst) == 12.5


def test_memory_end_bound_needs_a_binding_limit_and_few_stages():
    # device 0 can hold all 4 * 2 activations (limit 1e9): None; device 1 (limit 2) gets a bound
    assert bounds.memory_end_bounds(make_instance(p=2, m=4, v=2, limit=[1e9, 2]))[0] is None
    assert bounds.memory_end_bounds(make_instance(p=2, m=4, limit=None)) == [None, None]
    # resident params count against the limit: limit 3 - params 1 = 2 behaves as limit 2 above
    inst = make_instance(p=2, m=4, memory={"activation": 1, "params": 1, "limit": 3})
    assert bounds.memory_end_bounds(inst) == [13.0, 13.0]
    # five stages on one device: only with max_stages >= 5 (then at least the work 6 * 5 * 3)
    five = make_instance(p=1, m=6, v=5, limit=6)
    assert bounds.memory_end_bounds(five) == [None]
    assert bounds.memory_end_bounds(five, max_stages=5) == [90.0]


@pytest.mark.parametrize("extra", [dict(segments=2), dict(recompute={"R": 0.5, "kept": 0.25})])
def test_memory_end_bound_is_gated_off_where_its_argument_does_not_hold(extra):
    assert bounds.memory_end_bounds(make_instance(p=2, m=4, v=2, limit=2, **extra)) == [None, None]


def test_memory_end_bound_holds_with_overlapped_pairs_at_their_share():
    # at 2 no pair fits (a pair needs 3: one microbatch's two stages and another's first), so
    # the bound is the plain instance's; at 3 pairs fit and the work counts at x = 0.5
    tight = make_instance(p=2, m=4, v=2, limit=2)
    assert bounds.memory_end_bounds(tight.with_(overlap={"FB": 0.8})) == \
        bounds.memory_end_bounds(tight) == [27.0, 26.0]
    roomy = make_instance(p=2, m=4, v=2, limit=3)
    assert bounds.memory_end_bounds(roomy) == [26.0, 25.0]
    assert bounds.memory_end_bounds(roomy.with_(overlap={"FB": 0.5})) == [13.0, 13.0]


def test_memory_end_bound_is_gated_off_for_replicas():
    inst = load_instance({"devices": 2, "microbatches": 4, "replicas": 2,
                          "times": {"F": 1, "I": 1, "W": 1}, "memory": {"limit": 1}})
    assert bounds.memory_end_bounds(inst) == [None, None]


def test_span_bounds_use_the_devices_own_tails(monkeypatch):
    # SMALL_37 (test_bounds.py, optimum span 115): with the "I down" memory edges (issue 18)
    # the span bounds are 96 and 103 with or without the devices' own tails
    from test_bounds import SMALL_37

    inst = load_instance(SMALL_37)
    assert bounds.device_span_bounds(inst) == [96.0, 103.0]
    assert bounds.device_span_bounds(inst, own_tails=False) == [96.0, 103.0]
    # with the weaker edge they replaced, F(t, j) -> F(s, j+L), device 1's own tails add 2
    keep = bounds.memory_edges
    monkeypatch.setattr(bounds, "memory_edges", lambda i, d: [
        e._replace(kind="F") if e.kind == "I" and e.source > e.stage else e for e in keep(i, d)])
    assert bounds.device_span_bounds(inst) == [92.0, 97.0]
    assert bounds.device_span_bounds(inst, own_tails=False) == [92.0, 95.0]


STEP = {"mode": "sync", "optimizer": 3, "allreduce": 1, "check": 2}


def test_heads_and_tails_through_the_step():
    """p=2, m=2, all ops 1, step sync: allreduce 1 per stage after its last W, one CHECK (2)
    after both, then each stage's optimizer (3)."""
    inst = make_instance(p=2, m=2, step=STEP)
    ht = bounds.heads_tails(inst, ordered=False)
    # heads (one microbatch's walk, copied): 0F 0, 1F 1, 1I 2, 1W 3, 0I 3, 0W 4;
    # 1AR after 1W (3 + 1 = 4), 0AR after 0W (5), CHECK after both ARs: max(4, 5) + 1 = 6,
    # OPT after CHECK: 6 + 2 = 8.
    # tails: OPT 0, CHECK 3 (its OPT), AR 2 + 3 = 5, the last W of each stage 1 + 5 = 6 (through
    # the step); the other ops keep their microbatch's own tails (0I 1, 1I 2, 1F 3, 0F 4).
    got = {str(op): (ht.head[op], ht.tail[op]) for op in ht.head}
    assert got == {
        "0F0": (0.0, 4.0), "0F1": (0.0, 4.0), "1F0": (1.0, 3.0), "1F1": (1.0, 3.0),
        "1I0": (2.0, 2.0), "1I1": (2.0, 2.0), "0I0": (3.0, 1.0), "0I1": (3.0, 1.0),
        "1W0": (3.0, 6.0), "1W1": (3.0, 6.0), "0W0": (4.0, 6.0), "0W1": (4.0, 6.0),
        "1AR": (4.0, 5.0), "0AR": (5.0, 5.0), "CHECK": (6.0, 3.0),
        "0OPT": (8.0, 0.0), "1OPT": (8.0, 0.0)}
    # the chain 0F 1F 1I 0I 0W (5), 0AR 1, CHECK 2, OPT 3: 11
    assert bounds.critical_path(inst) == 11.0
    # device 0 (ordered heads): 0I0 0I1 0W0 0W1 start at >= 3, take 4, and after the last come
    # AR + CHECK + OPT = 6: 3 + 4 + 6 = 13
    assert bounds.device_makespan_bounds(inst)[0] == 13.0
    assert bounds.analytic_bound(inst) == 13.0
    # device tails run through the step to the device's own optimizer: 0W0 -> 0AR (1) -> CHECK
    # (2) -> 0OPT (3) = 6; 0I0 + 0W0 first = 7; 0F0 -> 1F0 -> 1I0 -> 0I0 -> 0W0 (4) then 6 = 10
    plain = bounds.device_tails(inst, ht, 0)
    assert plain[Op("W", 0, 0)] == 6.0 and plain[Op("I", 0, 0)] == 7.0
    assert plain[Op("F", 0, 0)] == 10.0
    # so device 0's span bound is 13 (its I's and W's start at >= 3, take 4, and the last one's
    # tail is 6), CP-SAT's proven optimum span; without the step in the tails it was 7
    assert bounds.device_span_bounds(inst)[0] == 13.0


def test_memory_edges_net_of_params_and_only_below_m():
    # one stage per device, activation 1, weight 0.5, limit 2: I(s, j) -> F(s, j + L) with
    # L = floor(2 / 1) = 2; W(s, j) -> F(s, j + L) with L = floor((2 - 1) / 0.5) + 1 = 3
    E = bounds.MemoryEdge
    inst = make_instance(p=2, m=4, weight=0.5, limit=2)
    assert bounds.memory_edges(inst, 0) == [E("I", 0, 0, 2), E("W", 0, 0, 3)]
    assert bounds.in_flight_caps(inst, 0) == {0: 2}  # the I edge's lag, not the W edge's
    # params 1 under a limit of 3 leave the same 2 for activations
    with_params = make_instance(p=2, m=4, memory={"activation": 1, "weight": 0.5, "params": 1,
                                                  "limit": 3})
    assert bounds.memory_edges(with_params, 0) == [E("I", 0, 0, 2), E("W", 0, 0, 3)]
    # lags of m or more never bind (there is no microbatch j + m): with m = 3 the W edge goes
    assert bounds.memory_edges(inst.with_(microbatches=3), 0) == [E("I", 0, 0, 2)]


def test_one_machine_bound_by_hand():
    omb = bounds._one_machine_bound
    assert omb([]) == 0.0
    assert omb([(0.0, 0.25, 0.25)]) == 0.5  # below 1: nothing rounds up
    # A = (0, 4, 1) runs 0-1; B = (1, 2, 10) is released at 1 with a larger tail and preempts
    # it: B 1-3, 3 + 10 = 13; A resumes 3-6, 6 + 1 = 7: 13
    assert omb([(0, 4, 1), (1, 2, 10)]) == 13
    # three jobs released at once: the largest tail first, 0-1 (+5), 1-3 (+3), 3-6 (+1): 7
    assert omb([(0, 3, 1), (0, 1, 5), (0, 2, 3)]) == 7


def test_ordered_heads_follow_the_microbatch_chains():
    # p=2, m=2, all ops 1, in microbatch order: 0F1 after 0F0 (1), 1F1 after 0F1 and 1F0 (2),
    # 1I1 after 1F1 and 1I0 (3), 0I1 after 1I1 and 0I0 (4), 0W1 after 0W0 (5), 1W1 after 1W0 (4)
    inst = make_instance(p=2, m=2)
    ordered = {str(op): h for op, h in bounds.heads_tails(inst).head.items()}
    assert ordered == {"0F0": 0.0, "0F1": 1.0, "1F0": 1.0, "1F1": 2.0, "1I0": 2.0, "1I1": 3.0,
                       "0I0": 3.0, "0I1": 4.0, "0W0": 4.0, "0W1": 5.0, "1W0": 3.0, "1W1": 4.0}
    unordered = bounds.heads_tails(inst, ordered=False).head
    assert unordered[Op("F", 0, 1)] == 0.0 and unordered[Op("W", 0, 1)] == 4.0  # no chains


def test_heads_from_a_source_walk_its_microbatch_only():
    # from 0F1's start: 0F1 0, 1F1 1, 1I1 2, 1W1 3, 0I1 3, 0W1 4; microbatch 0 is not walked
    inst = make_instance(p=2, m=2)
    ht = bounds.heads_tails(inst, ordered=False, source=Op("F", 0, 1))
    assert {str(op): h for op, h in ht.head.items()} == {
        "0F1": 0.0, "1F1": 1.0, "1I1": 2.0, "1W1": 3.0, "0I1": 3.0, "0W1": 4.0}


def test_analytic_bound_objectives_and_defaults():
    inst = make_instance(p=1, m=1, F=0.1, I=0.1, W=0.1)  # one device: 0.3 of work
    assert bounds.analytic_bound(inst) == pytest.approx(0.3)  # the default is makespan
    assert bounds.analytic_bound(inst, "span") == pytest.approx(0.3)
    with pytest.raises(ValueError) as err:
        bounds.analytic_bound(inst, "bubble")
    assert str(err.value) == "objective: expected 'makespan' or 'span', got 'bubble'"


def test_span_bound_counts_the_memory_end_from_the_devices_first_start():
    # p=2, m=3, F = [2, 1], I = 2, W = [2, 3], limits 2 and 1 (activation 1).
    # Device 0 (F 2, I 2, W 2; cap 2): h_I = 2 + 1 + 2 = 5, x = 2 * 2 = 4: 5 - 4 = 1 idle, work
    #   3 * 6 = 18: 19; end window y = max(0 + 2 * 2, 4 + 1 * 2) + F 2 + I + W 4 = 12 >= the
    #   chain 2 + 1 + 2 + 2 + W 2 = 9: nothing more. 19.
    # Device 1 (F 1, I 2, W 3; cap 1): h_F = 2, h_I = 3, x = 1: 3 - 1 = 2, work 18: 20; y = 2 * 3
    #   + 1 + 5 = 12 >= the chain 1 + 2 + 3 = 6. 20, from its first start at 2: a span of 18.
    inst = make_instance(p=2, m=3, F=[2, 1], I=2, W=[2, 3], limit=[2, 1])
    assert bounds.memory_end_bounds(inst) == [19.0, 20.0]
    assert bounds.analytic_bound(inst, "span") == 19.0  # max(19 - 0, 20 - 2) and the spans' 19
    assert bounds.analytic_bound(inst) == 20.0


# found by a search over small two-chunk instances: the memory end bound above every device's
# head-body-tail bound (69 > 68); CP-SAT's optimum (results/mutation/README.md, part 3) is above
MEMORY_DECIDES = {"devices": 2, "microbatches": 5, "chunks": 2, "placement": "loop",
                  "times": {"F": [2, 1, 1, 2], "I": 2, "W": [3, 1, 3, 1]},
                  "memory": {"activation": 1, "limit": 2}}


def test_the_memory_end_bound_can_decide_the_makespan_bound(monkeypatch):
    inst = load_instance(MEMORY_DECIDES)
    assert bounds.memory_end_bounds(inst) == [69.0, 48.0]
    # since the "I down" memory edges (issue 18) the device bound reaches the optimum, 70
    assert max(bounds.device_makespan_bounds(inst)) == 70.0
    assert bounds.analytic_bound(inst) == 70.0
    # without them the memory end bound decides, as before
    keep = bounds.memory_edges
    monkeypatch.setattr(bounds, "memory_edges", lambda i, d: [
        e for e in keep(i, d) if not (e.kind == "I" and e.source > e.stage)])
    assert max(bounds.device_makespan_bounds(inst)) == 68.0
    assert bounds.analytic_bound(inst) == 69.0


def test_heads_and_tails_of_two_replicas_through_their_syncs():
    """replicas 2, p=2, m=2, all ops 1, sync 2: microbatch 0 runs stages 0, 1 (devices 0, 1),
    microbatch 1 stages 2, 3 (devices 1, 0); each SYNC joins a model stage's two copies."""
    inst = load_instance({"devices": 2, "microbatches": 2, "replicas": 2,
                          "times": {"F": 1, "I": 1, "W": 1}, "sync": 2})
    ht = bounds.heads_tails(inst, ordered=False)
    # each microbatch walks only its own replica's stages: F 0, F 1, I 2, W 3, I 3, W 4;
    # 0SYNC after 0W0 and 2W1 (both end at 5), 1SYNC after 1W0 and 3W1 (end 4); every W's tail
    # is at least its SYNC (2), the I's keep their W (1), a SYNC ends the step (0)
    assert {str(op): (ht.head[op], ht.tail[op]) for op in ht.head} == {
        "0F0": (0.0, 4.0), "1F0": (1.0, 3.0), "1I0": (2.0, 2.0), "1W0": (3.0, 2.0),
        "0I0": (3.0, 1.0), "0W0": (4.0, 2.0),
        "2F1": (0.0, 4.0), "3F1": (1.0, 3.0), "3I1": (2.0, 2.0), "3W1": (3.0, 2.0),
        "2I1": (3.0, 1.0), "2W1": (4.0, 2.0),
        "0SYNC": (5.0, 0.0), "1SYNC": (4.0, 0.0)}
    assert set(ht.tail) == set(ht.head)  # each replica's ops copied to its own microbatches only
    assert bounds.critical_path(inst) == 7.0  # F F I I W (5) + SYNC 2
    assert bounds.device_lower_bounds(inst) == [6.0, 6.0]  # both start at 0 (0F0, 2F1), work 6


def test_device_tails_without_the_microbatch_chains():
    # p=2, m=2, all ops 1. Unordered: 0F0 -> 1F0 -> 1I0 -> 0I0 -> 0W0: 4, 0I0 -> 0W0: 1.
    # Ordered, 0W0 -> 0W1 adds 1 to each: 5, 2, 1.
    inst = make_instance(p=2, m=2)
    F, I, W = (lambda j: Op("F", 0, j)), (lambda j: Op("I", 0, j)), (lambda j: Op("W", 0, j))
    plain = bounds.device_tails(inst, bounds.heads_tails(inst, ordered=False), 0)
    assert plain == {F(0): 4.0, I(0): 1.0, W(0): 0.0, F(1): 4.0, I(1): 1.0, W(1): 0.0}
    chained = bounds.device_tails(inst, bounds.heads_tails(inst), 0)
    assert chained == {F(0): 5.0, I(0): 2.0, W(0): 1.0, F(1): 4.0, I(1): 1.0, W(1): 0.0}


def test_memory_end_bound_adds_the_chain_the_end_window_cannot_hold():
    # p=3, m=4, all ops 1, comm 1, only device 0 limited (limit 1: one microbatch in flight).
    # h_I = head of 0I0 = 0F0 1 +1 1F0 1 +1 2F0 1, 2I0 1 +1 1I0 1 +1 = 9; x = 1 forward before
    # it: 9 - 1 = 8; work 4 * 3 = 12. End window: y = (m - 1) * W = 3 (n = 0, weight 0), plus
    # 0F3 1 and the full state's I + W 2: 6; the chain from 0F0 to 0W0 is 9 + 1 + 1 = 11, so
    # 11 - 6 = 5 more: 8 + 12 + 5 = 25
    assert bounds.memory_end_bounds(make_instance(p=3, m=4, comm=1, limit=[1, 10, 10])) == [
        25.0, None, None]
    # weight 0.5, limit 2: cap 2, x = 2: 9 - 2 = 7; y = max over n = 0 (left 1: k = min(3,
    # 1 / 0.5) = 2 W's: 2), n = 1 (left 0: one I + W, 2): 2, + 1 + 2 = 5; 11 - 5 = 6: 7 + 12 + 6
    inst = make_instance(p=3, m=4, comm=1, weight=0.5, limit=[2, 10, 10])
    assert bounds.memory_end_bounds(inst) == [25.0, None, None]


def test_memory_end_bound_of_two_stages_by_their_knapsacks():
    # p=2, v=2 (device 0: stages 0, 2), m=3, all ops 1, comm 1, device 0 limit 2.
    # h_I = head of 2I0: 0F 1 +1 1F 1 +1 2F 1 +1 3F 1, 3I 1 +1 = 9. Start: prefixes (memory,
    # work) (1, 1), (2, 2), at most m = 3 of them in 2: x = 2; 9 - 2 = 7; work 3 * 2 * 3 = 18.
    # End: the full state (both wait for I) holds 2 and has I + W = 4 left; room 2 - 2 = 0
    # leaves the W-only states (memory 0): (m - 1) * 2 = 4; y = 4 + 2F 1 + 4 = 9. The chain from
    # 2F0 to 0W0: 2F 1 +1 3F 1 3I 1 +1 2I 1 +1 1I 1 +1 0I 1 0W 1 = 11: 11 - 9 = 2. 7 + 18 + 2 = 27
    assert bounds.memory_end_bounds(make_instance(p=2, m=3, v=2, comm=1, limit=[2, 10])) == [
        27.0, None]
    # weight 0.5, limit 3: x = 3 (prefix (1, 1) three times): 9 - 3 = 6; room 3 - 2 = 1, two
    # states of the 0.5-weight W's (work 1 each): 2; y = 2 + 1 + 4 = 7; 11 - 7 = 4: 6 + 18 + 4
    inst = make_instance(p=2, m=3, v=2, comm=1, weight=0.5, limit=[3, 10])
    assert bounds.memory_end_bounds(inst) == [28.0, None]


def test_memory_end_bound_terms_on_a_three_stage_pipeline():
    """p=3, comm 1, F = I = 1, only device 0 limited: h_I = 9 (four hand-offs), the chain from
    0F0 to 0W0's end 9 + I + W. Each case: idle before h_I + work + max(chain - y, 0)."""
    def end_bound(**kw):
        return bounds.memory_end_bounds(make_instance(p=3, comm=1, **kw))[0]

    # all m = 4 activations fit exactly (4 * 1 = 4): no bound
    assert bounds.memory_end_bounds(make_instance(p=2, m=4, limit=[4, 4])) == [None, None]
    # limit 2, weight 0: cap 2, x = 2: 9 - 2 = 7; y = max(3 W, 1 (I + W) + 2 W) = 4,
    # + F + I + W = 7; chain 11: 7 + 12 + (11 - 7) = 23
    assert end_bound(m=4, limit=[2, 100, 100]) == 23.0
    # activation 2, weight 1, limit 4: cap 4 / 2 = 2, x = 2: 7; y: n = 0 leaves 4 - 2 = 2 for
    # 2 / 1 = 2 W's: 2; n = 1 leaves 0: I + W = 2; y = 2 + 1 + 2 = 5; 7 + 12 + (11 - 5) = 25
    assert end_bound(m=4, activation=2, weight=1, limit=[4, 100, 100]) == 25.0
    # m = 2, W = 0.5, limit 1: x = 1: 8; y = 1 W = 0.5 (below 1), + 1 + 1.5 = 3; chain
    # 9 + 1 + 0.5 = 10.5: 8 + 2 * 2.5 + 7.5 = 20.5
    assert end_bound(m=2, W=0.5, limit=[1, 100, 100]) == 20.5
    # W = 2, weight 0.25, limit 3: cap 3, x = 3: 6; y = max(n=0: 3 W's = 6 (room for 8),
    # n=1: I + W + 2 W's = 7, n=2: 2 (I + W) = 6) = 7, + 1 + 3 = 11; chain 9 + 1 + 2 = 12:
    # 6 + 4 * 4 + 1 = 23
    assert end_bound(m=4, W=2, weight=0.25, limit=[3, 100, 100]) == 23.0
    # W = 2, weight 0.5, limit 2: cap 2, x = 2: 7; y = max(n=0: 1 / 0.5 = exactly 2 W's = 4,
    # n=1: I + W = 3) = 4, + 1 + 3 = 8; chain 12: 7 + 16 + 4 = 27
    assert end_bound(m=4, W=2, weight=0.5, limit=[2, 100, 100]) == 27.0


def test_memory_end_bound_counts_light_w_states():
    # p=2, v=2, m=3, comm 1, W = 0.5, limit 2: as the knapsack test above, but the W-only
    # states carry 0.5 and 1.0 of work: y = (m - 1) * 1.0 + 1 + 3 = 6; chain 10 + 0.5 = 10.5;
    # 7 + 3 * 2 * 2.5 + 4.5 = 26.5
    assert bounds.memory_end_bounds(make_instance(p=2, m=3, v=2, comm=1, W=0.5,
                                                  limit=[2, 10])) == [26.5, None]


def test_heads_from_a_source_are_zero_where_it_does_not_reach():
    # from 1F1's start: 0F1 is not reachable (0), 1I1 1, 1W1 2, 0I1 2, 0W1 3
    inst = make_instance(p=2, m=2)
    ht = bounds.heads_tails(inst, ordered=False, source=Op("F", 1, 1))
    assert {str(op): h for op, h in ht.head.items()} == {
        "0F1": 0.0, "1F1": 0.0, "1I1": 1.0, "1W1": 2.0, "0I1": 2.0, "0W1": 3.0}


def test_too_small_limit_names_every_mode_offered_and_rounds_to_nine_digits():
    inst = make_instance(p=2, m=2, v=2, limit=1, recompute={"R": 0.5, "kept": 0.25},
                         offload={"fraction": 0.5, "d2h": 0.5})
    with pytest.raises(InfeasibleMemoryError) as err:
        check_memory(inst)
    assert "other stages (recompute, offload offered); set memory.limit to at least " \
           "[1.25, 1.25] (per device)" in str(err.value)  # recompute keeps 0.25 < offload 0.5
    with pytest.raises(InfeasibleMemoryError) as err:
        check_memory(make_instance(p=1, m=2, activation=1 / 3, limit=0.1))
    assert str(err.value).endswith("set memory.limit to at least [0.333333333] (per device)")
    assert err.value.min_limit == [1 / 3]


def test_serial_schedule_takes_each_stages_own_mode_and_leaves_the_step_out():
    # stage 0 recomputes (keeps 0.25), stage 1 keeps (recompute would keep all 1.0 of it)
    inst = make_instance(p=2, m=2, recompute={"R": 0.5, "kept": [0.25, 1.0]})
    assert _tokens(bounds.serial_schedule(inst)) == [
        ["0F0", "0R0", "0I0", "0W0", "0F1", "0R1", "0I1", "0W1"],
        ["1F0", "1I0", "1W0", "1F1", "1I1", "1W1"]]
    # the optimizer steps run by the tail rule, after the order: not listed in it
    stepped = bounds.serial_schedule(make_instance(p=2, m=2, step=STEP))
    assert _tokens(stepped)[0] == ["0F0", "0I0", "0W0", "0F1", "0I1", "0W1"]


def test_heads_through_a_post_validation_step_count_the_norms_hand_off():
    # p=2, m=1, comm 1, post-validation: 0F 0-1 +1, 1F 2-3, 1I 3-4, 1W 4-5 +1, 0I 5-6, 0W 6-7;
    # each AR (1) after its stage's W, each OPT (1) after its AR; 0NORM (0) after 0AR at 8,
    # 1NORM after 1AR (6) and 0NORM + the hand-off 1: 9
    inst = make_instance(p=2, m=1, comm=1, step={"mode": "post-validation", "optimizer": 1,
                                                 "allreduce": 1})
    ht = bounds.heads_tails(inst, ordered=False)
    heads = {str(op): h for op, h in ht.head.items()}
    assert heads == {"0F0": 0.0, "1F0": 2.0, "1I0": 3.0, "1W0": 4.0, "0I0": 5.0, "0W0": 6.0,
                     "0AR": 7.0, "1AR": 5.0, "0NORM": 8.0, "1NORM": 9.0, "0OPT": 8.0,
                     "1OPT": 6.0}
    assert bounds.critical_path(inst) == 9.0  # 0W0 6 + 1 + AR 1 + OPT 1 (or 1NORM at 9)


def test_ordered_heads_from_a_source():
    # from 1F1's start, with the microbatch chains: microbatch 0 is not reached (0); 1I1 1,
    # 1W1 2, 0I1 2, 0W1 3
    inst = make_instance(p=2, m=2)
    ht = bounds.heads_tails(inst, source=Op("F", 1, 1))
    assert {str(op): h for op, h in ht.head.items() if h} == {
        "1I1": 1.0, "1W1": 2.0, "0I1": 2.0, "0W1": 3.0}
    assert len(ht.head) == 12


def test_heads_and_tails_say_whether_they_assume_microbatch_order():
    # device_tails reads ``ordered`` to decide whether the microbatch chains and memory edges
    # hold: the unordered walks (with and without a source) must say False, the ordered True
    inst = make_instance(p=2, m=2)
    assert bounds.heads_tails(inst).ordered is True
    assert bounds.heads_tails(inst, ordered=False).ordered is False
    assert bounds.heads_tails(inst, ordered=False, source=Op("F", 0, 1)).ordered is False
    assert bounds.unordered_heads_tails(inst, source=Op("F", 0, 1)).ordered is False


def test_heads_and_tails_walk_the_graph_they_are_given():
    # p=2, m=1, all ops 1, every unit fused (B = I + W = 2): 0F0 0, 1F0 1, 1B0 2, 0B0 2 + 2 = 4;
    # tails 0B0 0, 1B0 2, 1F0 2 + 2 = 4, 0F0 5 (the split graph would have I and W ops)
    inst = make_instance(p=2, m=1)
    fused = TaskGraph(inst, fused=True)
    want = {"0F0": (0.0, 5.0), "1F0": (1.0, 4.0), "1B0": (2.0, 2.0), "0B0": (4.0, 0.0)}
    for ordered in (False, True):
        ht = bounds.heads_tails(inst, ordered=ordered, graph=fused)
        assert {str(op): (ht.head[op], ht.tail[op]) for op in ht.head} == want


def test_fused_backwards_tails_run_through_the_step():
    # the same fused graph with the sync step (allreduce 1, check 2, optimizer 3): each B is its
    # unit's last op and feeds its stage's AR: tails 1 + 2 + 3 = 6 (1B0's own walk gave 2);
    # heads 1AR 2 + 2 = 4, 0AR 4 + 2 = 6, CHECK max(4, 6) + 1 = 7, OPT 7 + 2 = 9
    inst = make_instance(p=2, m=1, step=STEP)
    ht = bounds.heads_tails(inst, ordered=False, graph=TaskGraph(inst, fused=True))
    assert {str(op): (ht.head[op], ht.tail[op]) for op in ht.head} == {
        "0F0": (0.0, 5.0), "1F0": (1.0, 4.0), "1B0": (2.0, 6.0), "0B0": (4.0, 6.0),
        "1AR": (4.0, 5.0), "0AR": (6.0, 5.0), "CHECK": (7.0, 3.0),
        "0OPT": (9.0, 0.0), "1OPT": (9.0, 0.0)}
