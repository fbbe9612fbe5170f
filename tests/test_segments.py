"""Sequence segments without torch: the instance's segment keys and per-segment tables, the cost
model, the task graph's segment-aware durations and memory, Seq1F1B (bubble exactly
(p-1)/(km+p-1) at equal segment costs), the greedy, CP-SAT (exact and LNS), lowering and the
exports (torch's CSV refuses segments, our extended CSV writes 3F12.2)."""

from __future__ import annotations

import json
import math
import random

import pytest
from conftest import random_valid_schedule

from zbsolve.baselines import NAMES, NotApplicable, evaluate_all, generate
from zbsolve.baselines.seq1f1b import backward_units, warmup
from zbsolve.export import write
from zbsolve.export.executor import load_table, lower
from zbsolve.export.files import load_schedule
from zbsolve.export.p2p_check import require_safe
from zbsolve.export.torch_csv import TorchCSVError
from zbsolve.graph import TaskGraph
from zbsolve.instance import InstanceError, load_instance
from zbsolve.ops import Op
from zbsolve.segments import SegmentModel, balanced_lengths, layer_flops, pairs
from zbsolve.simulate import ScheduleError, simulate, validate
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.bounds import min_memory_limit
from zbsolve.solver.heuristic import GreedyParams, greedy, heuristic_schedule
from zbsolve.solver.large import improve
from zbsolve.solver.model import TimeScale


def seg_instance(p=4, m=6, k=2, F=2.0, I=2.2, W=1.2, comm=0.0, limit=None, weight=0.5,
                 **extra):
    return load_instance(dict(name=f"seg-p{p}-m{m}-k{k}", devices=p, microbatches=m,
                              segments=k, times=dict(F=F, I=I, W=W), comm=comm,
                              memory=dict(activation=1.0, weight=weight, limit=limit), **extra))


PREFIX = dict(segment_lengths="balanced", segment_costs="prefix",
              segment_model=dict(seq=4096, hidden=512, heads=8, layers=2, vocab=1000))


# ---------------------------------------------------------------------- the instance
def test_one_segment_is_the_old_instance():
    inst = seg_instance(k=1)
    assert inst.segments == 1 and inst.segment_table("F") == tuple((2.0,) for _ in range(4))
    assert inst.duration("I", 2) == inst.duration("I", 2, 0) == 2.2
    assert "segments" not in inst.to_dict()


def test_whole_values_split_by_length():
    inst = seg_instance(k=3, segment_lengths=[1, 2, 1])
    assert inst.segment_table("F")[0] == (0.5, 1.0, 0.5)
    assert inst.segment_memory(1, 1) == (0.5, 0.25)
    assert inst.duration("B", 3, 2) == pytest.approx((2.2 + 1.2) / 4)
    assert inst.F == (2.0,) * 4  # per-stage fields stay whole-microbatch figures
    assert math.isclose(sum(inst.duration("W", 0, g) for g in range(3)), 1.2)


def test_explicit_per_segment_times_and_memory():
    inst = load_instance(dict(
        devices=2, microbatches=2, segments=2,
        times=dict(F=[[1, 2], 3], I=[[1.5, 2.5], [2, 2]], W=1),
        memory=dict(activation=[[1, 1], 2], weight=[[0.5, 0.5], 1])))
    assert inst.F == (3.0, 3.0) and inst.segment_table("F") == ((1.0, 2.0), (1.5, 1.5))
    assert inst.I == (4.0, 4.0) and inst.segment_table("W")[1] == (0.5, 0.5)
    assert inst.segment_memory(0, 1) == (1.0, 0.5)
    again = load_instance(inst.to_dict())
    assert again == inst and again.segment_table("F") == inst.segment_table("F")


def test_memory_units_in_per_segment_lists():
    inst = load_instance(dict(devices=2, microbatches=2, segments=2, times=dict(F=1, I=1, W=1),
                              memory=dict(activation=[["1GiB", "512MiB"], "1GiB"],
                                          weight="256MiB", limit="8GiB")))
    assert inst.memory_unit == "GiB"
    assert inst.segment_memory(0, 1)[0] == pytest.approx(0.5)
    assert inst.activation == (1.5, 1.0)


@pytest.mark.parametrize("data, why", [
    (dict(segments=0), "segments: expected an integer >= 1"),
    (dict(segments=1, times=dict(F=[[1, 1], 1], I=1, W=1)),
     r"times.F\[0\]: a list of per-segment values needs segments > 1"),
    (dict(segments=2, times=dict(F=[[1, 1, 1], 1], I=1, W=1)),
     r"times.F\[0\]: expected one number per segment \(2\), got a list of 3"),
    (dict(segments=2, times=dict(F=[[1, "x"], 1], I=1, W=1)), r"times.F\[0\]\[1\]"),
    (dict(segments=2, segment_lengths="balanced"), "balanced needs the model shape"),
    (dict(segments=2, segment_costs="prefix"), "prefix needs the model shape"),
    (dict(segments=2, segment_costs="flops"), "segment_costs: expected one of length, prefix"),
    (dict(segments=2, segment_lengths=[1]), "expected 2 lengths"),
    (dict(segments=2, segment_lengths=[1, 0]), r"segment_lengths\[1\]: expected a length > 0"),
    (dict(segments=2, segment_lengths=[100, 100],
          segment_model=dict(seq=256, hidden=64, layers=1)), "summing to segment_model.seq = 256"),
    (dict(segments=2, segment_model=dict(seq=256, hidden=64, layers=[1, 1, 1])),
     "segment_model.layers: expected one number per logical stage"),
    (dict(segments=2, segment_model=dict(seq=256, hidden=64, heads=5, layers=1)),
     "divisible by heads"),
    (dict(segments=2, segment_model=dict(seq=256, hidden=64, layers=1, depth=3)),
     "segment_model: unknown key"),
    (dict(segments=2, memory=dict(activation=[[1, 1], 1], weight=[[2, 0], 0])),
     r"memory.weight\[0\]\[0\]: 2.0 exceeds memory.activation\[0\]\[0\]"),
])
def test_bad_segment_input_names_the_field(data, why):
    base = dict(devices=2, microbatches=2, times=dict(F=1, I=1, W=1))
    with pytest.raises(InstanceError, match=why):
        load_instance({**base, **data})


def test_round_trip_and_resegmenting():
    inst = seg_instance(k=3, limit=3, **PREFIX)
    again = load_instance(json.loads(json.dumps(inst.to_dict())))
    assert again == inst
    two = inst.with_(segments=2)
    assert two.segments == 2 and two.F == inst.F
    assert two.segment_lengths == tuple(float(x) for x in balanced_lengths(
        SegmentModel(seq=4096, hidden=512, heads=8, layers=(2,) * 4, vocab=1000), 2))
    assert inst.with_(limit=4).segment_table("I") == inst.segment_table("I")


# ---------------------------------------------------------------------- costs
def test_pairs_count_the_attention_of_a_segment():
    for start, end in ((0, 5), (3, 9), (7, 8)):
        causal = sum(t + 1 for t in range(start, end))  # query t sees keys 0..t
        assert pairs(start, end) == causal
        assert pairs(start, end, "dense") == (end - start) * end


def test_prefix_costs_grow_with_the_prefix():
    model = SegmentModel(seq=4096, hidden=512, layers=(2,))
    first, last = layer_flops(model, 0, 1024), layer_flops(model, 3072, 4096)
    assert last["W"] == first["W"]  # projections and MLP: the length only
    assert last["F"] > first["F"] and last["I"] - first["I"] == 2 * (last["F"] - first["F"])
    inst = seg_instance(k=4, **{**PREFIX, "segment_lengths": "equal"})
    f = inst.segment_table("F")[1]
    assert f[0] < f[1] < f[2] < f[3] and math.isclose(sum(f), 2.0)


def test_balanced_lengths_of_the_issue_example():
    """32k tokens, k = 4, 24 layers, h = 4096: the first segment is the longest, about 11k."""
    model = SegmentModel(seq=32768, hidden=4096, layers=(24,))
    lengths = balanced_lengths(model, 4)
    assert sum(lengths) == 32768 and lengths == sorted(lengths, reverse=True)
    assert 10500 < lengths[0] < 11500
    bounds = [(sum(lengths[:g]), sum(lengths[:g + 1])) for g in range(4)]
    totals = [sum(layer_flops(model, a, b).values()) for a, b in bounds]
    assert max(totals) / min(totals) < 1.001  # every segment costs the same
    equal = [sum(layer_flops(model, 8192 * g, 8192 * (g + 1)).values()) for g in range(4)]
    assert equal[3] / equal[0] > 1.8  # what equal lengths would cost instead


# ---------------------------------------------------------------------- the task graph
def test_graph_durations_and_lifetimes_per_segment():
    inst = seg_instance(k=2, segment_lengths=[3, 1])
    graph = TaskGraph(inst)
    assert graph.duration(Op("F", 1, 0, 0)) == 1.5 and graph.duration(Op("F", 1, 0, 1)) == 0.5
    lts = graph.lifetimes(2, 3, 1)
    assert sorted(lt.amount for lt in lts) == [0.125, 0.125]
    assert {lt.dies for lt in lts} == {Op("I", 2, 3, 1), Op("W", 2, 3, 1)}
    assert (Op("I", 2, 3, 1), 0.0) in graph.preds(Op("I", 2, 3, 0))


def test_random_orders_simulate_with_the_segment_memory():
    inst = seg_instance(p=3, m=3, k=3, comm=0.1, **PREFIX)
    rng = random.Random(5)
    for _ in range(20):
        sim = simulate(inst, random_valid_schedule(inst, rng))
        assert min(sim.peak_memory) >= 0.999 and max(sim.peak_memory) <= 3 + 1e-9


# ---------------------------------------------------------------------- Seq1F1B
@pytest.mark.parametrize("p, m, k", [(2, 3, 2), (4, 8, 2), (4, 5, 4), (8, 4, 3)])
def test_seq1f1b_bubble_is_exactly_the_closed_form(p, m, k):
    """Equal segment costs, no comm: makespan (km + p - 1) units, bubble (p-1)/(km+p-1); in
    flight on stage 0: p + k - 1 units."""
    inst = seg_instance(p=p, m=m, k=k, F=1.0 * k, I=1.0 * k, W=1.0 * k, weight=0.0)
    sim = validate(inst, generate("seq1f1b", inst))
    assert sim.makespan == pytest.approx((k * m + p - 1) * 3)
    assert sim.bubble_makespan == pytest.approx((p - 1) / (k * m + p - 1))
    assert sim.peak_memory[0] == pytest.approx(min(p + k - 1, k * m) / k)
    zb = validate(inst, generate("seq1f1b-zb", inst))
    assert zb.makespan < sim.makespan or (p, m) == (2, 3) and zb.makespan <= sim.makespan


def test_seq1f1b_with_one_segment_is_1f1b_and_zb_h1():
    """The unit order at k = 1 is 1F1B's (ZB-H1's), so the families refuse k = 1 (no duplicate
    rows in baselines and sweeps) and name the family that is the same schedule."""
    from zbsolve.baselines.common import NotApplicable
    from zbsolve.baselines.seq1f1b import stage_order

    inst = seg_instance(p=4, m=6, k=1)
    assert [stage_order(s, 4, 6, 1, split=False) for s in range(4)] == \
        generate("1f1b", inst).orders
    assert [stage_order(s, 4, 6, 1, split=True, w_delay=s) for s in range(4)] == \
        generate("zb-h1", inst).orders
    for name, same in (("seq1f1b", "1f1b"), ("seq1f1b-zb", "zb-h1")):
        with pytest.raises(NotApplicable, match=f"with one segment it is {same} exactly"):
            generate(name, inst)


def test_seq1f1b_order_warm_up_and_newest_segment_first():
    inst = seg_instance(p=4, m=3, k=3, comm=0.3, **PREFIX)
    sched = generate("seq1f1b", inst)
    for r, row in enumerate(sched.orders):
        first_b = next(i for i, op in enumerate(row) if op.kind == "B")
        assert first_b == warmup(4, r, 3) + 1  # the warm-up, then one forward
        assert [(op.mb, op.seg) for op in row if op.kind == "B"] == backward_units(3, 3)
    validate(inst, sched)
    validate(inst, generate("seq1f1b-zb", inst))


def test_whole_microbatch_families_refuse_segments_with_the_reason():
    inst = seg_instance(k=2)
    results = {r.name: r for r in evaluate_all(inst)}
    assert results["seq1f1b"].applicable and results["seq1f1b-zb"].applicable
    for name in NAMES:
        if name not in ("seq1f1b", "seq1f1b-zb"):
            assert not results[name].applicable
    with pytest.raises(NotApplicable, match="1f1b: schedules whole microbatches.*seq1f1b"):
        generate("1f1b", inst)
    with pytest.raises(NotApplicable, match="needs chunks = 1"):
        generate("seq1f1b", seg_instance(k=2, chunks=2, placement="v"))


# ---------------------------------------------------------------------- greedy and solver
@pytest.mark.parametrize("v, placement", [(1, "loop"), (2, "v"), (2, "loop")])
def test_greedy_fits_the_smallest_limit(v, placement):
    inst = load_instance(dict(devices=3, microbatches=4, chunks=v, placement=placement,
                              segments=3, times=dict(F=1, I=1.2, W=0.6), comm=0.1,
                              memory=dict(activation=1, weight=0.4), **PREFIX | dict(
                                  segment_model=dict(seq=999, hidden=64, layers=1))))
    for limit in (min(min_memory_limit(inst)) * f for f in (1.0, 1.7)):
        lim = inst.with_(limit=limit)
        sched = greedy(lim, GreedyParams())
        sim = validate(lim, sched)  # complete, deadlock-free, within the limit
        assert max(sim.peak_memory) <= limit + 1e-9
    best, sim = heuristic_schedule(inst.with_(limit=3.0))
    assert sim.feasible


def test_solver_beats_seq1f1b_and_its_table_runs_segments(tmp_path):
    inst = seg_instance(p=3, m=3, k=2, comm=0.1, limit=2.5, **PREFIX)
    res = solve(inst, SolveOptions(time_limit=8, workers=1, seed=0))
    sim = validate(inst, res.schedule)
    hand = {r.name: r.result.makespan for r in res.baselines
            if r.applicable and r.result.feasible}
    assert res.objective_value <= hand["seq1f1b-zb"] + 1e-9 <= hand["seq1f1b"] + 1e-9
    assert res.lower_bound <= res.objective_value and sim.feasible
    table = lower(inst, res.schedule)
    require_safe(table)
    segs = {(a.kind, a.seg) for row in table.actions for a in row}
    assert ("F", 1) in segs and ("SEND_F", 1) in segs and ("RECV_B", 1) in segs
    table.dump(tmp_path / "t.json")
    assert load_table(tmp_path / "t.json").compute_orders() == table.compute_orders()


def test_lns_improves_a_segmented_schedule():
    inst = seg_instance(p=4, m=8, k=2, comm=0.1, limit=3.0, **PREFIX)
    start = generate("seq1f1b", inst)
    best, sim, stats = improve(inst, start, time_limit=6)
    assert sim.feasible and sim.makespan <= simulate(inst, start).makespan + 1e-9
    assert stats.windows >= 1


def test_time_scale_keeps_length_split_memory_exact():
    inst = seg_instance(k=2, limit=2.5, **PREFIX)
    scale = TimeScale.choose(inst)
    assert scale.memory_exact and scale.memory % 4096 == 0


# ---------------------------------------------------------------------- exports
def test_torch_csv_refuses_segments_and_the_extended_csv_writes_them(tmp_path):
    inst = seg_instance(p=2, m=2, k=2)
    sched = generate("seq1f1b-zb", inst)
    for fmt in ("torch-csv", "torch-csv-comms"):
        with pytest.raises(TorchCSVError, match="no segment index.*torch-csv-ext"):
            write(inst, sched, fmt, tmp_path / "x.csv")
    write(inst, sched, "torch-csv-ext", tmp_path / "ext.csv")
    text = (tmp_path / "ext.csv").read_text()
    assert "0F1.1" in text and "1I0.1" in text
    back = load_schedule(tmp_path / "ext.csv")
    assert back.orders == sched.orders
    with pytest.raises(ScheduleError, match="segments 0..1"):
        simulate(inst, type(sched)([[Op("F", 0, 0, 2)], []]))


# ---------------------------------------------------------------------- sweep and bench
def test_sweep_takes_the_segment_count_as_a_layout(tmp_path):
    from zbsolve.sweep import SolverParams, SweepConfig, run_sweep

    inst = load_instance(dict(name="sw", devices=3, microbatches=3, times=dict(F=2, I=2, W=1),
                              comm=0.05, memory=dict(activation=1, weight=0.5), **PREFIX | dict(
                                  segment_model=dict(seq=999, hidden=64, layers=1))))
    config = SweepConfig(limits=[0.5, 1.0], out_dir=tmp_path, segments=[1, 2],
                         params=SolverParams(time_limit=2, workers=1), progress=False,
                         plot=False)
    result = run_sweep(inst, config)
    table = result.table
    assert set(table["layout"]) == {"c1", "c1-k2"} and set(table["segments"]) == {1, 2}
    assert result.reference_peak == 3.0  # 1F1B on the unsegmented model
    hand = set(table[table["source"] == "hand-made"]["schedule"] + "@" + table["layout"])
    assert {"seq1f1b@c1-k2", "1f1b@c1"} <= hand and "1f1b@c1-k2" not in hand
    # at half of 1F1B's memory the segmented layout is faster: the front crosses layouts
    half = table[(table["limit_fraction"] == 0.5) & (table["source"] == "solver")]
    by_layout = dict(zip(half["layout"], half["makespan"]))
    assert by_layout["c1-k2"] < by_layout["c1"]
    for rel in table["schedule_file"].dropna():
        sched = load_schedule(tmp_path / rel)
        validate(load_instance(sched.meta["instance"]), sched)


def test_bench_segment_cases_and_their_goal():
    from zbsolve.bench import build_cases, meets

    cases = [c for c in build_cases() if c.family == "segments"]
    assert [c.inst.limit[0] for c in cases] == [8.0, 4.0]
    full, half = cases
    assert full.inst.segments == 4 and full.ops == 3 * 8 * 16 * 4
    names = dict(half.targets)
    assert names["seq1f1b-zb"] <= names["seq1f1b"] and "1f1b@full-memory" in names
    assert meets(half, {"value": names["seq1f1b-zb"]})
    assert not meets(half, {"value": names["seq1f1b-zb"] + 1})
    assert not meets(full, {"value": dict(full.targets)["seq1f1b-zb"] * 1.01})


def test_long_sequence_instance_is_the_rescaled_zb_row():
    """instances/seq1f1b: the ZB 1.5B times at s = 1024 times the FLOP ratio of s = 16k."""
    from zbsolve.data import instances_dir
    from zbsolve.segments import stage_flops

    inst = load_instance(instances_dir() / "seq1f1b" / "gpt-1.5b-s16k-p8-m16-k4.yaml")
    shape = SegmentModel(seq=16384, hidden=2304, heads=24, layers=(3,) * 8)
    row = {"F": 18.52, "I": 18.09, "W": 9.34}
    for kind, t in row.items():
        ratio = stage_flops(shape, 1, 0, 16384)[kind] / stage_flops(shape, 1, 0, 1024)[kind]
        assert getattr(inst, kind)[0] == pytest.approx(t * ratio, abs=0.005)
    assert inst.comm == pytest.approx(0.60 * 16)
    assert inst.segment_lengths == (5449, 4218, 3568, 3149)
