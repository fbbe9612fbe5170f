"""Memory modes (issue 13): instance fields, tokens, task-graph jobs and lifetimes, and the
simulator's compute and copy streams, checked on hand-computed timelines."""

from __future__ import annotations

import json
import random
import re

import pytest
from conftest import make_instance, random_valid_schedule

from zbsolve.graph import TaskGraph
from zbsolve.instance import InstanceError
from zbsolve.ops import Op, parse_op
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate

REC = {"R": 0.5, "kept": 0.25}
OFF = {"fraction": 1.0, "d2h": 1.0}


def ops(text: str) -> list[Op]:
    return [parse_op(t) for t in text.split()]


def one_device(**modes) -> object:
    return make_instance(p=1, m=2, F=1, I=1, W=1, **modes)


# ---------------------------------------------------------------------- instance fields
def test_instance_offers_modes_from_its_fields():
    assert make_instance().modes == ("keep",)
    inst = make_instance(recompute=REC, offload=OFF)
    assert inst.modes == ("keep", "recompute", "offload")
    assert inst.recompute.R == (0.5,) * 4 and inst.recompute.kept == (0.25,) * 4
    assert inst.offload.h2d == inst.offload.d2h == (1.0,) * 4  # h2d defaults to d2h
    assert inst.offload.streams == 1
    assert inst.duration("R", 2) == 0.5 and inst.duration("L", 0) == 1.0
    assert inst.kept(0, "recompute") == 0.25 and inst.kept(0, "offload") == 0.0
    again = make_instance(recompute=REC, offload=OFF).from_dict(inst.to_dict())
    assert again.recompute == inst.recompute and again.offload == inst.offload
    assert inst.with_modes(("keep", "offload")).modes == ("keep", "offload")


@pytest.mark.parametrize("fields, message", [
    ({"recompute": {"R": 1.0}}, "recompute.kept: required"),
    ({"recompute": {"R": 1.0, "kept": 2.0}}, "recompute.kept[0]: 2.0 exceeds memory.activation"),
    ({"recompute": {"R": 1.0, "kept": 0.1, "x": 1}}, "recompute: unknown key(s) ['x']"),
    ({"offload": {"fraction": 1.0}}, "offload.d2h: required"),
    ({"offload": {"fraction": 1.5, "d2h": 1.0}}, "offload.fraction[0]: 1.5 is more than"),
    ({"offload": {"d2h": 1.0, "streams": 3}}, "offload.streams: expected 1"),
    ({"recompute": [1, 2]}, "recompute: expected a mapping"),
])
def test_bad_mode_fields_are_refused_with_the_field(fields, message):
    with pytest.raises(InstanceError) as exc:
        make_instance(**fields)
    assert message in str(exc.value)


# ---------------------------------------------------------------------- tokens
@pytest.mark.parametrize("token, op", [
    ("3R12", Op("R", 3, 12)), ("3RS12", Op("RS", 3, 12)), ("3O12", Op("O", 3, 12)),
    ("3L12.1", Op("L", 3, 12, 1)),
])
def test_mode_tokens_round_trip(token, op):
    assert parse_op(token) == op and str(op) == token


def test_bad_token_names_the_mode_kinds():
    with pytest.raises(ValueError, match=r"<F\|I\|W\|B\|R\|RS\|O\|L>"):
        parse_op("3X12")


# ---------------------------------------------------------------------- the task graph
def test_graph_jobs_of_each_mode():
    inst = make_instance(p=2, m=2, recompute=REC, offload=OFF)
    g = TaskGraph(inst, modes={(0, 0, 0): "recompute", (1, 1, 0): "offload"})
    assert g.unit_ops(0, 0) == tuple(ops("0F0 0R0 0I0 0W0"))
    assert g.unit_ops(1, 1) == tuple(ops("1F1 1O1 1L1 1I1 1W1"))
    assert g.unit_ops(0, 1) == tuple(ops("0F1 0I1 0W1"))
    assert g.count() == 3 * 4 + 1 + 2 == len(list(g.ops()))
    assert g.preds(Op("R", 0, 0)) == [(Op("F", 0, 0), 0.0)]
    assert (Op("R", 0, 0), 0.0) in g.preds(Op("I", 0, 0))
    assert g.preds(Op("L", 1, 1)) == [(Op("O", 1, 1), 0.0)]
    assert (Op("L", 1, 1), 0.0) in g.preds(Op("I", 1, 1))
    assert Op("O", 1, 1) not in set(g.device_ops(1))  # copies are not compute-stream jobs
    assert list(g.copy_ops(1)) == ops("1O1 1L1")
    assert g.exists(Op("R", 0, 0)) and not g.exists(Op("R", 0, 1))
    assert TaskGraph.of(inst, g.ops()).modes == g.modes  # the schedule's ops say the modes


def test_unit_with_two_modes_is_refused():
    inst = one_device(recompute=REC, offload=OFF)
    sched = Schedule([ops("0F0 0R0 0O0 0L0 0I0 0W0 0F1 0I1 0W1")])
    with pytest.raises(ScheduleError, match=r"runs both recompute and offload"):
        simulate(inst, sched)


def test_lifetimes_hold_the_whole_activation_at_the_backward_and_weight_until_w():
    inst = make_instance(p=1, m=1, activation=1.0, weight=0.5, recompute=REC)
    g = TaskGraph(inst, modes="recompute")
    held = {(lt.born.kind, lt.born_at, lt.dies.kind): lt.amount for lt in g.lifetimes(0, 0)}
    # 0.75 dies when F ends; 0.25 (the checkpoint) lives to I; R re-allocates 0.75, of which
    # the weight's 0.5 lives to W.
    assert held == {("F", 0, "F"): 0.75, ("F", 0, "I"): 0.25, ("R", 0, "I"): 0.25,
                    ("R", 0, "W"): 0.5}


# ---------------------------------------------------------------------- the simulator
def test_recompute_timeline_and_memory():
    inst = one_device(recompute=REC)
    r = simulate(inst, Schedule([ops("0F0 0F1 0R0 0I0 0W0 0R1 0I1 0W1")]))
    assert r.start[Op("R", 0, 0)] == 2 and r.start[Op("I", 0, 0)] == 2.5
    assert r.makespan == 7 and r.busy == [7]
    # F0 keeps 0.25 when it ends, F1 brings 1 (1.25), R0 brings back 0.75: peak 1.25, not 2.
    assert r.peak_memory == [1.25]
    keep = simulate(inst, Schedule([ops("0F0 0F1 0I0 0W0 0I1 0W1")]))
    assert keep.makespan == 6 and keep.peak_memory == [2]


def test_offload_copies_overlap_compute_and_not_each_other():
    inst = make_instance(p=1, m=3, F=1, I=1, W=1, offload=OFF)
    sched = Schedule([ops("0F0 0F1 0O0 0F2 0O1 0L0 0I0 0L1 0W0 0I1 0W1 0I2 0W2")])
    r = simulate(inst, sched)
    # copy stream: O0 1-2 (as F0 ends), O1 2-3, L0 3-4 (F2 has ended, O1 freed), L1 5-6 (I0
    # has ended); F2 is written after O0, so it starts when O0 has freed its activation.
    assert [r.start[op] for op in ops("0O0 0O1 0L0 0L1")] == [1, 2, 3, 5]
    assert [r.start[op] for op in ops("0F2 0I0 0I1 0I2")] == [2, 4, 6, 8]
    assert r.makespan == 10 and r.busy == [9]  # copies are not compute time
    assert r.peak_memory == [2]  # never more than two activations on the device
    keep = simulate(inst, Schedule([ops("0F0 0F1 0F2 0I0 0W0 0I1 0W1 0I2 0W2")]))
    assert keep.peak_memory == [3]


def test_two_copy_streams_let_a_copy_out_pass_a_load():
    row = Schedule([ops("0F0 0O0 0F1 0L0 0O1 0I0 0W0 0L1 0I1 0W1")])
    one = simulate(one_device(offload=OFF), row)
    two = simulate(one_device(offload={**OFF, "streams": 2}), row)
    assert one.start[Op("O", 0, 1)] == 4 and two.start[Op("O", 0, 1)] == 3


def test_load_starts_when_the_job_before_it_ends():
    inst = make_instance(p=1, m=2, F=1, I=1, W=1, offload={"d2h": 0.5})
    early = simulate(inst, Schedule([ops("0F0 0F1 0O0 0L0 0I0 0W0 0I1 0W1")]))
    late = simulate(inst, Schedule([ops("0F0 0F1 0O0 0I1 0W1 0L0 0I0 0W0")]))
    assert early.start[Op("L", 0, 0)] == 2  # F1 ends at 2 (O0 ran 1-1.5)
    assert late.start[Op("L", 0, 0)] == 4  # W1 ends at 4, though O0 ended at 1.5


def test_only_allocating_jobs_wait_for_a_copy_out_written_before_them():
    inst = one_device(offload=OFF)
    r = simulate(inst, Schedule([ops("0F0 0F1 0O1 0I0 0W0 0L1 0I1 0W1")]))
    assert r.start[Op("O", 0, 1)] == 2 and r.start[Op("I", 0, 0)] == 2  # I0 does not wait
    waits = simulate(inst, Schedule([ops("0F0 0O0 0F1 0L0 0I0 0W0 0I1 0W1")]))
    assert waits.start[Op("F", 0, 1)] == 2  # F1 allocates: it waits for O0 (1-2)


def test_mode_ops_in_row_order_per_stream():
    inst = one_device(offload=OFF)
    late = Schedule([ops("0F0 0F1 0L0 0O0 0I0 0W0 0I1 0W1")])  # L0 issued before its O0
    with pytest.raises(ScheduleError, match=r"0L0 comes before its input 0O0"):
        simulate(inst, late)


def test_a_load_stuck_behind_its_row_order_names_what_it_waits_for():
    """A load waits for the compute job written before it: behind an I that needs the load,
    both streams deadlock, and the copy stream's line says what it waits for."""
    inst = make_instance(p=2, m=1, F=1, I=1, W=1, offload={"d2h": 0.5})
    rows = [ops("0F0 0O0 0I0 0L0 0W0"), ops("1F0 1I0 1W0")]
    with pytest.raises(ScheduleError) as exc:
        simulate(inst, Schedule(rows))
    assert str(exc.value) == (
        "deadlock: device 0 waits at position 1 on 0I0, which needs 0L0 (device 0); device 0 "
        "copy stream waits at position 1 on 0L0, which waits for 0I0 written before it")


def test_mode_not_offered_is_refused_with_the_fix():
    inst = one_device()
    with pytest.raises(ScheduleError, match=r"memory mode 'recompute' is not offered by the "
                                            r"instance \(it offers keep\): add recompute: "
                                            r"\{R, kept\} to the instance"):
        simulate(inst, Schedule([ops("0F0 0R0 0I0 0W0 0F1 0I1 0W1")]))


def test_missing_backward_mode_op_is_reported():
    inst = one_device(recompute=REC)
    with pytest.raises(ScheduleError, match=r"device 0 position 1: 0I0 comes before its input 0R0 \(row order"):
        simulate(inst, Schedule([ops("0F0 0I0 0R0 0W0 0F1 0I1 0W1")]))


@pytest.mark.parametrize("seed", range(8))
def test_keep_everywhere_changes_nothing(seed):
    """An instance that offers modes simulates a keep-only schedule exactly as before."""
    base = make_instance(p=3, m=4, F=1, I=0.7, W=0.4, comm=0.1, weight=0.3)
    offered = base.with_(recompute={"R": 0.9, "kept": 0.1}, offload={"d2h": 0.5})
    sched = random_valid_schedule(base, random.Random(seed))
    a, b = simulate(base, sched), simulate(offered, sched)
    assert (a.start, a.end, a.peak_memory, a.memory_curve) == \
        (b.start, b.end, b.peak_memory, b.memory_curve)


# ---------------------------------------------------------------------- baselines
def _small(limit=3, **fields):
    fields = fields or {"recompute": {"R": 1, "kept": 0.1}, "offload": {"d2h": 0.25}}
    return make_instance(p=4, m=8, F=1, I=1, W=1, limit=limit, **fields)


def test_full_recompute_baselines_recompute_every_unit_before_its_backward():
    from zbsolve.baselines import generate

    inst = _small()
    for name, keep_name, makespan in (("1f1b-recompute", "1f1b", 41), ("zb-h1-recompute",
                                                                        "zb-h1", 35)):
        sched, keep = generate(name, inst), generate(keep_name, inst)
        r = simulate(inst, sched)
        assert r.makespan == makespan and r.feasible
        assert r.peak_memory == pytest.approx([1.3, 1.2, 1.1, 1.0])  # kept + one live
        assert sum(op.kind == "R" for op in sched.ops()) == 32
        for row, base in zip(sched.orders, keep.orders):  # the base order, R right before
            assert [e for e in row if e.kind != "R"] == base
            for a, b in zip(row, row[1:]):
                if a.kind == "R":
                    assert b.unit == a.unit and b.kind in ("I", "B")


def test_recompute_to_fit_recomputes_the_fewest_evenly_spread_microbatches():
    from zbsolve.baselines import generate
    from zbsolve.baselines.memory_modes import spread, with_recompute

    inst = _small(limit=3)
    sched = generate("1f1b-recompute-fit", inst)
    assert sched.meta["recomputed"] == 24  # 6 of 8 microbatches on each of the 4 stages
    assert {op.mb for op in sched.ops() if op.kind == "R"} == set(spread(6, 8)) == \
        {1, 2, 3, 5, 6, 7}
    r = simulate(inst, sched)
    assert r.feasible and r.makespan == 39 and r.peak_memory[0] == pytest.approx(2.2)
    fewer = with_recompute(generate("1f1b", inst), [(s, j, 0) for s in range(4)
                                                    for j in spread(5, 8)], "five")
    assert not simulate(inst, fewer).feasible
    assert simulate(inst, generate("zb-h1-recompute-fit", inst)).makespan == 33


def test_pipeoffload_rule_on_1f1b():
    from zbsolve.baselines import generate

    inst = _small(limit=3)
    sched = generate("1f1b-offload", inst)
    r = simulate(inst, sched)
    # copies of 0.25 hide under F = 1: 1F1B's time, stage 0 holding 3 activations, not 4
    assert r.makespan == 33 and r.peak_memory == [3, 3, 2, 1] and r.feasible
    # every microbatch whose gap reaches 3 (d2h + h2d) = 1.5 and leaves room for a copy
    # written between its F and its backward; the last stage's gaps are 0
    assert sched.meta["offloaded"] == 22
    assert {op.stage for op in sched.ops() if op.kind == "O"} == {0, 1, 2}
    assert simulate(inst, generate("1f1b", inst)).peak_memory == [4, 3, 2, 1]


@pytest.mark.parametrize("name, reason", [
    ("1f1b-recompute", "the instance offers no recompute (add recompute: {R, kept})"),
    ("1f1b-offload", "the instance offers no offload (add offload: {fraction, d2h})"),
])
def test_mode_baselines_need_their_mode(name, reason):
    from zbsolve.baselines import NotApplicable, generate

    with pytest.raises(NotApplicable, match=re.escape(reason)):
        generate(name, make_instance())


def test_recompute_fit_refuses_where_keep_fits_or_nothing_fits():
    from zbsolve.baselines import NotApplicable, generate

    with pytest.raises(NotApplicable, match="1f1b fits the memory limit without recompute"):
        generate("1f1b-recompute-fit", _small(limit=4))
    with pytest.raises(NotApplicable, match="even recomputing every microbatch exceeds"):
        generate("zb-h1-recompute-fit", _small(limit=1.2))


def test_baselines_command_lists_the_mode_families(tmp_path, capsys):
    import json

    from zbsolve.cli import main

    path = tmp_path / "modes.yaml"
    _small(limit=3).dump(path)
    assert main(["baselines", str(path), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["1f1b-recompute-fit"]["makespan"] == 39 and rows["1f1b-recompute-fit"]["feasible"]
    assert rows["1f1b-offload"]["peak_memory"] == [3, 3, 2, 1]
    assert not rows["1f1b"]["feasible"]


# ---------------------------------------------------------------------- the solver
def _solve(inst, seconds=20):
    from zbsolve.solver.api import SolveOptions, solve

    return solve(inst, SolveOptions(time_limit=seconds, workers=2, seed=0))


def test_solver_chooses_recompute_where_memory_binds():
    inst = _small(limit=2, recompute={"R": 1, "kept": 0.1})
    r = _solve(inst)
    # 30 is the optimum (CP-SAT proves it in about a second on an idle machine); under load the
    # time limit may stop it earlier, never above the best baseline
    assert r.lower_bound <= 30 <= r.objective_value < r.baseline_value == 35
    assert r.baseline == "zb-h1-recompute"
    sim = simulate(inst, r.schedule)
    assert sim.feasible and sim.makespan == r.objective_value
    modes = TaskGraph.of(inst, r.schedule.ops()).modes  # the choice is read off the orders
    assert 0 < len(modes) < 32 and set(modes.values()) == {"recompute"}


def test_solver_places_copies_on_the_copy_stream():
    inst = _small(limit=3, offload={"d2h": 0.5})
    r = _solve(inst)
    sim = simulate(inst, r.schedule)
    assert sim.feasible and r.objective_value == sim.makespan
    assert r.objective_value < 33 == r.baseline_value  # 1f1b-offload, the best fitting baseline
    assert any(op.kind == "O" for op in r.schedule.ops())
    assert r.lower_bound <= r.objective_value


def test_memory_tiebreak_chooses_modes_at_the_best_step_time():
    """The memory phase covers modes: at the optimal step time (15, as keep's) it offloads
    where a copy fits into the bubble; keep's own optimum holds [4, 3, 2, 1]."""
    keep = make_instance(p=4, m=4, F=1, I=1, W=1)
    offered = make_instance(p=4, m=4, F=1, I=1, W=1, offload={"d2h": 0.25})
    a, b = _solve(keep), _solve(offered)
    assert a.objective_value == b.objective_value == 15 and b.status == "optimal"
    assert simulate(keep, a.schedule).peak_memory == [4.0, 3.0, 2.0, 1.0]
    assert b.schedule.meta["solver"]["memory_phase"]["cp_status"] == "OPTIMAL"
    sim = simulate(offered, b.schedule)
    assert sim.feasible and sim.makespan == 15 and sum(sim.peak_memory) == 6
    assert any(op.kind == "O" for op in b.schedule.ops())


def test_greedy_with_recompute_starts_a_v_placement_below_keeps_minimum():
    """No hand-made family covers V with recompute; the greedy's recompute proxy does. Keep
    needs 2.0 per device; at 1.6 the proxy holds max(kept 0.25, weight 0.5) = 0.5 per unit
    and keeps one activation's extra (1 - 0.5) free: limit 1.6 - 0.5 = 1.1."""
    from zbsolve.solver.api import Budget, _greedy, serial_schedule
    from zbsolve.solver.bounds import min_memory_limit
    from zbsolve.solver.mode_greedy import recompute_proxy

    inst = make_instance(p=2, m=6, v=2, placement="v", weight=0.5, limit=1.6,
                         recompute={"R": 1, "kept": 0.25})
    assert min_memory_limit(inst.with_modes(("keep",))) == [2.0, 2.0]
    proxy = recompute_proxy(inst)
    assert proxy.activation == (0.5,) * 4 and proxy.limit == (1.1, 1.1)
    assert proxy.modes == ("keep",)
    found = {c.name: c for c in _greedy(inst, "makespan", Budget(10.0, False))}
    assert list(found) == ["greedy-recompute"]  # the keep greedy cannot fit 1.6
    c = found["greedy-recompute"]
    sim = simulate(inst, c.schedule)
    assert sim.feasible and sim.makespan == c.sim.makespan
    assert c.sim.makespan < simulate(inst, serial_schedule(inst)).makespan == 72
    assert all(op.kind != "O" for op in c.schedule.ops())
    assert any(op.kind == "R" for op in c.schedule.ops())
    # no room for one re-materialized unit: no proxy (the serial witness remains)
    assert recompute_proxy(inst.with_(limit=0.5)) is None
    assert recompute_proxy(make_instance(p=2, m=6, limit=1.6)) is None  # no recompute offered


def test_large_method_keeps_the_incumbents_modes_and_reorders_its_recomputes():
    from zbsolve.solver.api import SolveOptions, solve
    from zbsolve.solver.large import improve

    inst = make_instance(p=4, m=16, limit=2.0, weight=0.5, recompute={"R": 1, "kept": 0.1})
    r = solve(inst, SolveOptions(time_limit=10, workers=2, seed=0, method="large"))
    info = r.schedule.meta["solver"]
    assert info["method"] == "large" and "keeps the memory modes" in info["note_modes"]
    large = info["large"]
    assert large["windows"] >= 1 and r.objective_value <= large["start_value"]
    sim = simulate(inst, r.schedule)
    assert sim.feasible and sim.makespan == r.objective_value
    modes = TaskGraph.of(inst, r.schedule.ops()).modes
    assert modes and set(modes.values()) == {"recompute"}
    # offload copies: the window model has no copy stream, so the schedule comes back as is
    inst2, mixed = _mixed()
    out, out_sim, stats = improve(inst2, mixed, time_limit=5)
    assert out is mixed and stats.windows == 0 and out_sim.feasible


def test_bounds_with_modes_stay_below_the_optimum():
    from zbsolve.solver.bounds import analytic_bound, memory_end_bounds

    inst = _small(limit=2, recompute={"R": 1, "kept": 0.1})
    assert memory_end_bounds(inst) == [None] * 4  # its proof holds whole activations F to I
    assert analytic_bound(inst) <= 30
    keep = make_instance(p=4, m=8, limit=2)
    assert memory_end_bounds(keep) != [None] * 4


# ---------------------------------------------------------------------- exports
def _mixed():
    """1F1B on the small instance with microbatches 1 and 2 recomputed and copies for 5."""
    from zbsolve.baselines import generate
    from zbsolve.baselines.memory_modes import with_recompute

    inst = _small(limit=None)
    sched = with_recompute(generate("1f1b-offload", inst), [(0, 1, 0), (1, 2, 0)], "mixed")
    # a unit has one mode: drop the copies of the units recomputed instead
    rows = [[e for e in row if not (e.kind in ("O", "L") and e.unit in {(0, 1, 0), (1, 2, 0)})]
            for row in sched.orders]
    return inst, Schedule(rows, name="mixed")


def test_torch_csv_refuses_memory_modes_with_the_reason(tmp_path):
    from zbsolve.export import write
    from zbsolve.export.torch_csv import TorchCSVError

    inst, sched = _mixed()
    simulate(inst, sched)  # a valid schedule
    for fmt in ("torch-csv", "torch-csv-comms"):
        out = tmp_path / f"{fmt}.csv"
        with pytest.raises(TorchCSVError, match=rf"--format {fmt}: the schedule uses memory "
                                                r"modes \(L, O, R actions"):
            write(inst, sched, fmt, out)
        assert not out.exists()


def test_torch_csv_ext_writes_mode_cells_in_row_order(tmp_path):
    import csv

    from zbsolve.export import write

    inst, sched = _mixed()
    out = tmp_path / "ext.csv"
    report = write(inst, sched, "torch-csv-ext", out)
    rows = list(csv.reader(out.open()))
    assert rows == [[str(e) for e in row] for row in sched.orders]
    assert "0R1" in rows[0] and "1R2" in rows[1] and "0O0" in rows[0] and "0L0" in rows[0]
    assert rows[0].index("0O0") < rows[0].index("0L0") < rows[0].index("0B0")
    assert report.p2p_checks  # the lowered table was proved deadlock-free


def test_torch_csv_ext_mode_cells_read_back_to_the_same_schedule(tmp_path):
    from zbsolve.export import write
    from zbsolve.export.torch_csv import parse_cell, read_torch_csv

    assert parse_cell("3RS12") == ([Op("RS", 3, 12)], None)
    assert parse_cell("3O12") == ([Op("O", 3, 12)], None)
    assert parse_cell(" 3L12 ") == ([Op("L", 3, 12)], None)
    assert parse_cell("3R12") == ([Op("R", 3, 12)], None)
    with pytest.raises(ValueError, match=r"bad token '3X12'.*<R\|RS\|O\|L>"):
        parse_cell("3X12")
    inst, sched = _mixed()
    rows = [list(row) for row in sched.orders]
    rows[2].insert(1, Op("RS", 2, 0))  # selective needs its fields: a second instance
    sel = inst.with_(recompute={"R": 1, "kept": 0.1, "R_selective": 0.5, "kept_selective": 0.3})
    for i, (instance, schedule) in enumerate(((inst, sched), (sel, Schedule(rows, name="sel")))):
        out = tmp_path / f"ext{i}.csv"
        write(instance, schedule, "torch-csv-ext", out)
        back = read_torch_csv(out)
        assert back.orders == schedule.orders
        a, b = simulate(instance, schedule), simulate(instance, back)
        assert (a.makespan, a.peak_memory) == (b.makespan, b.peak_memory)
        assert a.start == b.start


def test_executor_table_carries_mode_actions(tmp_path):
    from zbsolve.export import write
    from zbsolve.export.executor import load_table, schedule_from_table
    from zbsolve.export.p2p_check import require_safe

    inst, sched = _mixed()
    out = tmp_path / "table.json"
    write(inst, sched, "executor", out)
    table = load_table(out)  # schema-checked: R, O, L are action kinds
    kinds = {a.kind for row in table.actions for a in row}
    assert {"R", "O", "L", "SEND_F", "RECV_B"} <= kinds
    assert table.compute_orders() == sched.orders  # copies stay where the row issues them
    require_safe(table)
    again = simulate(inst, schedule_from_table(table))
    assert again.makespan == simulate(inst, sched).makespan


def test_runner_takes_tables_with_memory_modes_on_its_own_engine_only():
    pytest.importorskip("torch")
    from zbsolve.export.executor import lower
    from zbsolve.runtime.model import GPTConfig
    from zbsolve.runtime.runner import TableMismatch, check_table

    inst, sched = _mixed()
    table = lower(inst, sched)
    cfg = GPTConfig.preset("gpt-tiny", layers=4)
    check_table(table, table.ranks, cfg)  # tests/test_runtime_modes.py runs such tables
    with pytest.raises(TableMismatch, match=r"engine torch: torch's pipelining runtime has no "
                                            r"recompute / offload actions \(L, O, R in table"):
        check_table(table, table.ranks, cfg, "torch")


# ---------------------------------------------------------------------- sweep and minimum memory
def test_sweep_offers_the_modes(tmp_path):
    from zbsolve.sweep import SolverParams, SweepConfig, run_sweep

    inst = _small(limit=None, recompute={"R": 1, "kept": 0.1})
    params = SolverParams(time_limit=10, workers=2, seed=0)
    table = {}
    for modes in (("keep", "recompute"), ("keep",)):
        res = run_sweep(inst, SweepConfig(limits=[0.5], out_dir=tmp_path / "-".join(modes),
                                          params=params, progress=False, plot=False,
                                          modes=modes))
        table[modes] = res.table
    with_modes, keep = table[("keep", "recompute")], table[("keep",)]
    solved = with_modes[with_modes["source"] == "solver"].iloc[0]
    assert 30 <= solved["makespan"] < 35  # the optimum is 30 (see the solver test above)
    assert "1f1b-recompute" in set(with_modes["schedule"])  # the baselines with modes listed
    fit = with_modes[with_modes["schedule"] == "zb-h1-recompute-fit"].iloc[0]  # made per limit
    # at limit 2 every microbatch must be recomputed (fewer do not fit), as zb-h1-recompute
    assert fit["makespan"] == 35 and fit["schedule_file"].endswith("-limit-2.json")
    written = Schedule.from_dict(json.loads((tmp_path / "keep-recompute" /
                                             fit["schedule_file"]).read_text()))
    assert sum(op.kind == "R" for op in written.ops()) == 32
    assert "1f1b-recompute" not in set(keep["schedule"])
    # keep alone: 35 is its optimum (proven in under a second idle), so never below it
    assert keep[keep["source"] == "solver"].iloc[0]["makespan"] >= 35 > solved["makespan"]


def test_sweep_refuses_a_mode_the_instance_lacks(tmp_path, capsys):
    from zbsolve.cli import main

    path = tmp_path / "plain.yaml"
    make_instance(p=2, m=2).dump(path)
    assert main(["sweep", str(path), "--modes", "keep,offload", "-o", str(tmp_path / "o"),
                 "--no-plot", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "modes: ['offload'] not offered" in err and "add the recompute/offload" in err


def test_minimum_memory_counts_the_cheapest_mode():
    from zbsolve.solver.bounds import InfeasibleMemoryError, check_memory, min_memory_limit

    two = {"p": 2, "m": 4, "v": 2, "placement": "v"}
    keep = make_instance(**two, limit=1.5)
    assert min_memory_limit(keep) == [2, 2]
    with pytest.raises(InfeasibleMemoryError, match=r"one activation of each stage .* or offer "
                                                    r"recompute: \{R, kept\}"):
        check_memory(keep)
    rec = make_instance(**two, limit=1.0, recompute={"R": 1, "kept": 0.1})
    assert min_memory_limit(rec) == [1.1, 1.1]  # one live activation + the other stage's kept
    with pytest.raises(InfeasibleMemoryError, match=r"one live activation plus what the "
                                                    r"cheapest memory mode keeps .*recompute "
                                                    r"offered.* at least \[1.1, 1.1\]"):
        check_memory(rec)
    off = make_instance(**two, offload={"fraction": 0.5, "d2h": 0.5})
    assert min_memory_limit(off) == [1.5, 1.5]


def test_serial_witness_fits_the_mode_minimum():
    from zbsolve.solver.bounds import min_memory_limit, serial_schedule

    for fields in ({"recompute": {"R": 1, "kept": 0.1}},
                   {"offload": {"fraction": 0.5, "d2h": 0.5}}):
        inst = make_instance(p=2, m=4, v=2, placement="v", **fields)
        inst = inst.with_(limit=min_memory_limit(inst)[0])
        r = simulate(inst, serial_schedule(inst))
        assert r.feasible and r.peak_memory == pytest.approx(min_memory_limit(inst))


@pytest.mark.parametrize("fields, message", [
    ({"recompute": {"R": 1e30, "kept": 0.1}}, "recompute.R[0]: 1e+30 is outside"),
    ({"offload": {"d2h": 1e-30}}, "offload.d2h[0]: 1e-30 is outside"),
    ({"recompute": {"R": 1.0, "kept": 0.1}, "segments": 2},
     "memory modes with sequence segments (segments > 1) are not supported yet (issue 13)"),
])
def test_mode_fields_out_of_range_or_with_segments_are_refused(fields, message):
    with pytest.raises(InstanceError) as exc:
        make_instance(**fields)
    assert message in str(exc.value)


# two copy streams: the model's optimum (53) runs the copy out 2O1 before the load 2L2 starts,
# and the load needs the memory 2O1 frees (device 1 holds 2 at most)
TWO_STREAMS = {"devices": 2, "microbatches": 3, "chunks": 2, "placement": "v",
               "times": {"F": [1, 4, 1, 3], "I": [1, 2, 3, 3], "W": [2, 3, 4, 4]}, "comm": 1,
               "memory": {"activation": [2, 1, 1, 1], "weight": [0, 0, 0.5, 0.5],
                          "limit": [4, 2]},
               "offload": {"fraction": 1.0, "d2h": 0.5, "h2d": 2.0, "streams": 2}}


def _model_rows(data, **limit):
    """The exact model's rows for ``data`` (one worker, seed 0, the CP-SAT ``limit``): the
    instance, CP-SAT's status name and value, and the rows ``ScheduleModel.entries`` writes."""
    from ortools.sat.python import cp_model

    from zbsolve.instance import load_instance
    from zbsolve.solver.model import build_model

    inst = load_instance(data)
    sm = build_model(inst, "makespan")
    solver = cp_model.CpSolver()
    solver.parameters.num_workers, solver.parameters.random_seed = 1, 0
    for key, value in limit.items():
        setattr(solver.parameters, key, value)
    status = solver.status_name(solver.solve(sm.model))
    return inst, status, solver.objective_value / sm.scale.time, Schedule(sm.entries(solver))


def test_a_load_is_written_after_the_copy_outs_that_end_before_it_starts():
    # the rows once wrote such a load before the copy out (on their separate streams nothing
    # else orders them): the simulator started the load when the compute job before it ended,
    # before the free, and device 1 reached 3 (results/audit/claims.py, draw [1, 99])
    inst, status, value, sched = _model_rows(TWO_STREAMS, max_time_in_seconds=20)
    assert status == "OPTIMAL" and value == 53
    assert any(op.kind == "L" for op in sched.device_ops(1))
    result = simulate(inst, sched)
    assert result.feasible and result.peak_memory[1] <= 2
    assert result.makespan >= 53  # a row cannot start a load inside a compute job: 55 here
    for row in sched.orders:  # each load after every copy out that ends before it starts
        at = {str(op): k for k, op in enumerate(row)}
        for op in row:
            if op.kind == "L":
                for o in row:
                    if o.kind == "O" and result.end[o] <= result.start[op] - 1e-9:
                        assert at[str(o)] < at[str(op)], (o, op)


# two copy streams again, half of each activation offloaded (results/audit/cli.py, draw [6, 44])
L_AFTER_O = {"devices": 3, "microbatches": 5, "chunks": 2, "placement": [0, 1, 1, 2, 0, 2],
             "times": {"F": [4, 4, 2, 2, 2, 2], "I": [1, 2, 3, 1, 1, 4], "W": [2, 4, 1, 2, 3, 1]},
             "memory": {"activation": [1, 1, 1, 1, 2, 1], "weight": [0, 0.5, 0.5, 0.5, 1, 0],
                        "limit": [4.5, 3.5, 2.5], "params": 0.5},
             "offload": {"fraction": 0.5, "d2h": 1.0, "h2d": 1.0, "streams": 2}}


def test_a_load_is_never_written_before_its_own_copy_out():
    # a copy out goes after the last allocating job that starts before it ends, a load (once)
    # after the last job that ends before it starts: a forward spanning both put the load
    # first. The simulator waited for the copy out across the streams; the executor table's
    # P2P check refused the row ("0L0 runs before 0O0"), so zbsolve export failed on the
    # solver's schedule (now the simulator refuses such a row too)
    from zbsolve.export.executor import lower
    from zbsolve.export.p2p_check import require_safe

    # a deterministic limit: the same solution on any machine
    inst, status, _, sched = _model_rows(L_AFTER_O, max_deterministic_time=4)
    assert status in ("OPTIMAL", "FEASIBLE")
    assert any(op.kind == "L" for op in sched.ops())
    assert simulate(inst, sched).feasible
    require_safe(lower(inst, sched))


def test_a_load_written_before_its_copy_out_is_refused_on_two_streams_too():
    # the simulator waited for the copy out across the streams; the runtime issues copies in
    # row order and would deadlock, and the P2P check refuses it: so does the simulator now
    from zbsolve.instance import load_instance

    inst = load_instance({"devices": 2, "microbatches": 1, "chunks": 2, "placement": "v",
                          "times": {"F": 1, "I": 1, "W": 1},
                          "offload": {"d2h": 1.0, "streams": 2}})

    def rows(first):
        return Schedule([[parse_op(t) for t in first],
                         [parse_op(t) for t in ("1F0", "2F0", "2I0", "2W0", "1I0", "1W0")]])

    assert simulate(inst, rows(("0F0", "0O0", "3F0", "3I0", "3W0", "0L0", "0I0", "0W0")))
    with pytest.raises(ScheduleError, match="0L0 comes before its input 0O0"):
        simulate(inst, rows(("0F0", "0L0", "3F0", "3I0", "3W0", "0O0", "0I0", "0W0")))
