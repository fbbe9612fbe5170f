"""zbsolve sweep: limits, layouts, fronts, queries, cache, interruption, files, CLI.

Most tests drive the sweep machinery with ``reference_solve`` below, an exact and deterministic
stand-in for CP-SAT built from the simulator (the best of a serial schedule and the hand-made
ones that fit), so they check the sweep's bookkeeping to exact numbers and stay fast. One test
runs the real solver end to end and is skipped, saying so, when ``zbsolve.solver`` is absent.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import INSTANCES, make_instance

from zbsolve.baselines import best_feasible, evaluate_all
from zbsolve.cli import main
from zbsolve.instance import Instance, InstanceError, load_instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import validate
from zbsolve.sweep import (
    Layout,
    SolverParams,
    SweepConfig,
    best_bubble_under_memory,
    envelope,
    layouts_for,
    pareto_flags,
    parse_limits,
    reference_peak,
    relayout,
    run_sweep,
    runner,
    smallest_memory_for_bubble,
)
from zbsolve.sweep.runner import CaseOutcome


class _Infeasible(InstanceError):
    def __init__(self, min_limit: list[float]):
        super().__init__(f"limit below the smallest feasible limit {max(min_limit):g}")
        self.min_limit = min_limit


def serial(inst: Instance) -> Schedule:
    """One microbatch at a time through the whole pipeline: the least memory any order needs."""
    orders: list[list[Op]] = [[] for _ in range(inst.devices)]
    for mb in range(inst.microbatches):
        for s in range(inst.stages):
            orders[inst.placement[s]].append(Op("F", s, mb))
        for s in reversed(range(inst.stages)):
            orders[inst.placement[s]] += [Op("I", s, mb), Op("W", s, mb)]
    return Schedule(orders, name="serial")


def reference_solve(inst: Instance, params: SolverParams, hints=()) -> CaseOutcome:
    need = [sum(inst.activation[s] for s in inst.stages_of(d)) for d in range(inst.devices)]
    if any(lim is not None and lim < n for lim, n in zip(inst.limit, need)):
        raise _Infeasible(need)
    names = ("gpipe", "1f1b", "zb-h1", "zb-h2")
    best = best_feasible(inst, params.objective, evaluate_all(inst, names))
    if best is None:
        return CaseOutcome(serial(inst), "feasible", hint=None)
    return CaseOutcome(best.schedule, "feasible", hint=best.name)


def tiny() -> Instance:
    return make_instance(p=3, m=4, F=1, I=1, W=1, activation=1.0, weight=0.5, name="tiny")


def sweep(tmp_path, limits="0.25:1.5:0.25", solve_fn=reference_solve, **kw):
    """Sweep ``tiny()``; ``solve_fn=None`` is the real solver."""
    if solve_fn is not None and kw.get("jobs", 1) == 1:
        kw.setdefault("in_process", True)  # the stand-ins here are closures: not picklable
    config = SweepConfig(limits=parse_limits(limits), out_dir=tmp_path, progress=False, **kw)
    return run_sweep(tiny(), config, solve_fn=solve_fn)


# ------------------------------------------------------------------ limits and layouts
def test_parse_limits_range_includes_stop_and_rounds():
    assert parse_limits("0.33:0.53:0.05") == [0.33, 0.38, 0.43, 0.48, 0.53]
    assert parse_limits("1, 0.5,1") == [0.5, 1.0]


@pytest.mark.parametrize("text, words", [
    ("0.5:0.1:0.1", "stop 0.1 is below start 0.5"),
    ("0.1:1:0", "step must be > 0"),
    ("1:2", "start:stop:step"),
    ("0,1", "must be > 0"),
    ("a,1", "expected a number, got 'a'"),
])
def test_parse_limits_rejects_with_field_name(text, words):
    with pytest.raises(InstanceError, match="--limits") as err:
        parse_limits(text)
    assert words in str(err.value)


def test_layouts_collapse_one_chunk_and_recut_keeps_totals():
    inst = load_instance(INSTANCES / "hetero-p8-m24.yaml")
    layouts = layouts_for(inst, [1, 2], ["loop", "v"])
    assert [lay.label for lay in layouts] == ["c1", "loop-c2", "v-c2"]
    v2 = relayout(inst, Layout(2, "v"))
    assert v2.placement == (0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0)
    assert v2.total_work == pytest.approx(inst.total_work)
    # the LM head stays in the last piece, the embedding in the first one
    assert v2.F[-2:] == pytest.approx((9.26, 29.77 - 9.26))
    assert v2.W[:2] == pytest.approx((10.54 - 4.67, 4.67))
    assert v2.activation[-1] == pytest.approx(1.008) and v2.weight[-1] == pytest.approx(0.191)
    back = relayout(v2, Layout(1, "loop"))
    assert back.F == pytest.approx(inst.F) and back.activation == pytest.approx(inst.activation)


def test_layout_errors_name_the_option():
    inst = make_instance(p=2, m=2, v=2)
    with pytest.raises(InstanceError, match="--chunks: cannot re-cut 2 chunk"):
        relayout(inst, Layout(3, "loop"))
    with pytest.raises(InstanceError, match="--placements: expected loop and/or v"):
        layouts_for(inst, [2], ["zigzag"])


def test_reference_peak_is_the_one_chunk_1f1b_peak():
    assert reference_peak(tiny()) == 3.0
    # two chunks of activation 1 are one stage of activation 2: 1F1B holds 4 of them
    assert reference_peak(make_instance(p=4, m=8, v=2, placement="v")) == 8.0
    # 1F1B runs one model: two replicas have no such peak (the sweep once answered with
    # 1F1B's own refusal, which names no sweep option)
    with pytest.raises(InstanceError, match="with 2 replicas give --absolute limits"):
        reference_peak(make_instance(p=2, m=4, replicas=2))


# ------------------------------------------------------------------ fronts and queries
def test_pareto_flags_and_envelope():
    peaks = [4, 2, 2, 3, 5, math.nan, 4]
    vals = [10, 14, 14, 12, 12, 1, 11]
    assert pareto_flags(peaks, vals) == [True, True, True, True, False, False, False]
    assert envelope(peaks, vals) == ([2, 3, 4], [14, 12, 10])


def test_queries_answer_from_the_table():
    table = pd.DataFrame({
        "peak": [2.0, 3.0, 4.0, 4.0, math.nan],
        "bubble_makespan": [0.30, 0.20, 0.05, 0.10, math.nan],
        "schedule": ["a", "b", "c", "d", "solver"],
    })
    assert smallest_memory_for_bubble(table, 0.2, "makespan")["schedule"] == "b"
    assert smallest_memory_for_bubble(table, 0.05, "makespan")["schedule"] == "c"
    assert smallest_memory_for_bubble(table, 0.01, "makespan") is None
    assert best_bubble_under_memory(table, 3.5, "makespan")["schedule"] == "b"
    assert best_bubble_under_memory(table, 1.0, "makespan") is None
    with pytest.raises(ValueError, match="objective: expected 'makespan' or 'span'"):
        best_bubble_under_memory(table, 1.0, "time")


# ------------------------------------------------------------------ the sweep itself
def test_sweep_front_is_monotone_and_files_exist(tmp_path):
    res = sweep(tmp_path)
    t = res.table
    assert res.reference_peak == 3.0
    assert sorted(t["limit"].unique()) == [0.75, 1.5, 2.25, 3.0, 3.75, 4.5]
    front = res.front.sort_values("peak")
    points = front.drop_duplicates(["peak", "makespan"])  # a schedule listed under two limits
    assert (points["makespan"].diff().dropna() < 0).all(), "more memory never worse"
    assert points[["peak", "makespan"]].values.tolist() == [[1.0, 28.0], [3.0, 14.0]]
    assert (front["peak"] <= front["limit"] + 1e-9).all()
    # every hand-made row fits its limit and was judged by the simulator
    hand = t[t["source"] == "hand-made"]
    assert set(hand["schedule"]) >= {"1f1b", "zb-h1", "gpipe"}
    assert (hand["peak"] <= hand["limit"] + 1e-9).all()
    assert set(hand[hand["limit"] == 3.0]["schedule"]) == {"1f1b", "zb-h1"}
    # the serial schedule is the only answer between the minimum and the 1F1B peak
    row = t[(t["source"] == "solver") & (t["limit"] == 1.5)].iloc[0]
    assert row["peak"] == 1.0 and row["makespan"] == 4 * (3 + 3 + 1)  # m round trips + W0
    for name in ("pareto.csv", "front.csv", "pareto.png", "pareto.svg"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "pareto.svg").read_text().lstrip().startswith("<?xml")
    csv = pd.read_csv(tmp_path / "pareto.csv")
    assert {"layout", "limit", "schedule", "makespan", "bubble_makespan", "bubble_span", "peak",
            "status", "gap", "on_front"} <= set(csv.columns)
    assert len(csv) == len(t)


def test_infeasible_limit_is_recorded_with_the_min_limit(tmp_path):
    t = sweep(tmp_path).table
    bad = t[t["limit"] == 0.75]
    assert list(bad["status"]) == ["infeasible"] and bad["min_limit"].iloc[0] == 1.0
    assert "below the smallest feasible limit 1" in bad["note"].iloc[0]
    assert not bad["on_front"].any() and math.isnan(bad["makespan"].iloc[0])


def test_rerun_hits_the_cache_and_refined_sweep_reuses(tmp_path):
    first = sweep(tmp_path)
    assert first.stats["solved"] == 6 and first.stats["cached"] == 0
    calls = runner.SOLVER_CALLS
    again = sweep(tmp_path)
    assert runner.SOLVER_CALLS == calls, "a rerun makes no solver call"
    assert again.stats == {**first.stats, "solved": 0, "cached": 6}
    assert again.table["cached"].all() or set(again.table[~again.table["cached"]]["source"]) == {
        "hand-made"}
    cols = ["limit", "schedule", "makespan", "peak", "status", "on_front"]
    pd.testing.assert_frame_equal(first.table[cols], again.table[cols])
    finer = sweep(tmp_path, limits="0.25:1.5:0.125")
    assert runner.SOLVER_CALLS == calls + 5 and finer.stats["cached"] == 6
    # other solver parameters are other cases
    sweep(tmp_path, limits="1.0", params=SolverParams(time_limit=7.0))
    assert runner.SOLVER_CALLS == calls + 6


def test_interrupted_sweep_keeps_what_finished(tmp_path):
    calls = []

    def stops_on_third(inst, params, hints):
        calls.append(inst.limit[0])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return reference_solve(inst, params)

    res = sweep(tmp_path, solve_fn=stops_on_third)
    assert res.interrupted and res.stats["missing"] == 4
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    assert not list((tmp_path / "cache").glob("*.tmp"))
    resumed = sweep(tmp_path)
    assert not resumed.interrupted
    assert resumed.stats["cached"] == 2 and resumed.stats["solved"] == 4


def test_each_case_is_hinted_with_the_best_finished_schedule_that_fits(tmp_path):
    seen: dict[float, list[str]] = {}

    def recording(inst, params, hints):
        seen[inst.limit[0]] = [h.name for h in hints]
        for h in hints:
            validate(inst, h)  # a hint always fits the case it is given to
        return reference_solve(inst, params)

    sweep(tmp_path, limits="0.5,1,1.5", solve_fn=recording)
    # 1.5: nothing finished yet; 3.0: the serial order from 1.5; 4.5: zb-h1's from 3.0
    assert seen == {1.5: [], 3.0: ["sweep@1.5"], 4.5: ["sweep@3"]}
    seen.clear()
    sweep(tmp_path, limits="0.5,0.75,1,1.5", solve_fn=recording)  # refined: the cache hints
    assert seen == {2.25: ["sweep@1.5"]}


def test_a_crashing_case_is_reported_not_cached(tmp_path):
    def broken(inst, params, hints):
        if inst.limit[0] == 3.0:
            raise RuntimeError("solver blew up")
        return reference_solve(inst, params)

    res = sweep(tmp_path, solve_fn=broken)
    err = res.table[res.table["status"] == "error"]
    assert list(err["limit"]) == [3.0] and "RuntimeError: solver blew up" in err["note"].iloc[0]
    assert res.stats["errors"] == 1
    assert sweep(tmp_path).stats["solved"] == 1  # retried


def test_a_wrong_schedule_from_the_solver_is_caught(tmp_path):
    def over_limit(inst, params, hints):
        return CaseOutcome(evaluate_all(inst, ("gpipe",))[0].schedule, "optimal")

    t = sweep(tmp_path, limits="1.0", solve_fn=over_limit).table
    assert t[t["source"] == "solver"]["status"].tolist() == ["error"]
    assert "exceeds its memory limit" in t[t["source"] == "solver"]["note"].iloc[0]


def test_parallel_jobs_match_serial(tmp_path):
    serial_t = sweep(tmp_path / "a", limits="0.5,1,1.5").table
    par = sweep(tmp_path / "b", limits="0.5,1,1.5", jobs=2)
    cols = ["layout", "limit", "schedule", "makespan", "peak", "on_front"]
    pd.testing.assert_frame_equal(serial_t[cols], par.table[cols])
    assert len(list((tmp_path / "b" / "cache").glob("*.json"))) == 3


def test_layouts_share_one_memory_axis(tmp_path):
    inst = make_instance(p=2, m=4, F=2, I=2, W=2, activation=1.0, weight=0.5)
    config = SweepConfig(limits=[1.0, 2.0], out_dir=tmp_path, chunks=[1, 2],
                         placements=["loop", "v"], progress=False, plot=False)
    t = run_sweep(inst, config, solve_fn=reference_solve).table
    assert sorted(t["layout"].unique()) == ["c1", "loop-c2", "v-c2"]
    assert sorted(t["limit"].unique()) == [2.0, 4.0]  # fractions of the one-chunk 1F1B peak 2
    v = t[(t["layout"] == "v-c2") & (t["source"] == "solver") & (t["limit"] == 2.0)].iloc[0]
    assert v["peak"] == 1.0  # serial: one microbatch of both half-size chunks


# ------------------------------------------------------------------ command line
def test_cli_sweep_queries_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "solve_with_zbsolve", reference_solve)
    path = tmp_path / "tiny.yaml"
    tiny().dump(path)
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--limits", "0.25:1.5:0.25", "-o", str(out), "--no-progress",
            "--target-bubble", "0.35", "--memory", "0.9", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stats"]["cases"] == 6 and data["stats"]["infeasible"] == 1
    tb = data["target_bubble"]
    assert tb["found"] and tb["row"]["schedule"] == "zb-h1" and tb["row"]["peak"] == 3.0
    assert tb["row"]["bubble_makespan"] == pytest.approx(1 - 36 / (3 * 14), abs=1e-6)
    mem = data["memory"]  # 0.9 of the 1F1B peak = 2.7: only the serial order fits
    assert mem["memory"] == pytest.approx(2.7) and mem["row"]["peak"] == 1.0
    assert [r["peak"] for r in data["front"]] == sorted(r["peak"] for r in data["front"])
    assert main(argv[:-1] + ["--target-bubble", "0.01"]) == 1  # unreachable: says so
    text = capsys.readouterr().out
    assert "bubble <= 0.01: no point of this sweep reaches it" in text
    assert "6 case(s): 0 solved, 6 from cache" in text


def test_cli_rejects_bad_options(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    tiny().dump(path)
    assert main(["sweep", str(path), "-o", str(tmp_path), "--limits", "2:1:0.1"]) == 2
    assert "--limits: stop 1 is below start 2" in capsys.readouterr().err
    assert main(["sweep", str(path), "-o", str(tmp_path), "--target-bubble", "1.5"]) == 2
    assert "--target-bubble: a bubble rate in [0, 1)" in capsys.readouterr().err


# ------------------------------------------------------------------ the real solver
def test_real_solver_sweep(tmp_path):
    params = SolverParams(time_limit=10.0, workers=1, seed=0)
    res = sweep(tmp_path, limits="0.25,0.5,1,1.5", params=params, solve_fn=None)
    t = res.table
    bad = t[t["limit"] == 0.75]
    assert bad["status"].tolist() == ["infeasible"] and bad["min_limit"].iloc[0] == 1.0
    solver = t[(t["source"] == "solver") & t["makespan"].notna()]
    assert set(solver["status"]) <= {"optimal", "feasible"}
    for _, row in solver.iterrows():
        hand = t[(t["source"] == "hand-made") & (t["limit"] == row["limit"])]
        if not hand.empty:
            assert row["makespan"] <= hand["makespan"].min() + 1e-9
        assert row["peak"] <= row["limit"] + 1e-9
    points = res.front.sort_values("peak").drop_duplicates(["peak", "makespan"])
    assert (points["makespan"].diff().dropna() < 0).all()
    # unlimited memory, zero comm: m(F+I+W) + (p-1)F = 14 is optimal, and 1F1B memory reaches it
    assert solver[solver["limit"] == 4.5]["makespan"].tolist() == [14.0]
    for path in (tmp_path / "cache").glob("*.json"):  # cached schedules re-validate
        payload = json.loads(path.read_text())
        if payload["schedule"] is not None:
            limit = payload["row"]["limit"]
            validate(tiny().with_(limit=limit), Schedule.from_dict(payload["schedule"]))
    calls = runner.SOLVER_CALLS
    sweep(tmp_path, limits="0.25,0.5,1,1.5", params=params, solve_fn=None)
    assert runner.SOLVER_CALLS == calls


def test_cli_absolute_limits_and_memory(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "solve_with_zbsolve", reference_solve)
    path = tmp_path / "tiny.yaml"
    tiny().dump(path)
    argv = ["sweep", str(path), "--limits", "1,3", "--absolute", "-o", str(tmp_path / "o"),
            "--no-progress", "--no-plot", "--memory", "2", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memory"]["memory"] == 2.0 and data["memory"]["row"]["peak"] == 1.0
    t = pd.read_csv(tmp_path / "o" / "pareto.csv")
    assert sorted(t["limit"].unique()) == [1.0, 3.0] and t["limit_fraction"].isna().all()
    assert t["peak_fraction"].dropna().tolist()[0] == pytest.approx(1 / 3)
    assert not (tmp_path / "o" / "pareto.png").exists()


def test_explicit_placement_cannot_be_recut():
    inst = make_instance(p=2, m=2, v=2, placement=[0, 1, 1, 0])
    assert layouts_for(inst, None, None) == [Layout(2, "explicit")]
    with pytest.raises(InstanceError, match="explicit placement, so --chunks/--placements"):
        layouts_for(inst, [1], None)


def test_each_point_names_a_schedule_file_that_carries_its_instance(tmp_path, capsys):
    res = sweep(tmp_path, chunks=[1, 2], placements=["loop", "v"])
    t = res.table
    has = t[~t["status"].isin(["infeasible", "error"])]
    assert has["schedule_file"].notna().all()
    assert t[t["status"] == "infeasible"]["schedule_file"].isna().all()
    for _, row in has.iterrows():
        path = tmp_path / row["schedule_file"]
        sched = Schedule.from_dict(json.loads(path.read_text()))
        inst = load_instance(sched.meta["instance"])
        sim = validate(inst, sched)
        assert (sim.makespan, max(sim.peak_memory)) == (row["makespan"], row["peak"])
        if row["source"] == "solver":
            assert row["schedule_file"] == f"schedules/{row['layout']}/solver-limit-{row['limit']:.10g}.json"
            assert inst.limit[0] == row["limit"]
        else:
            assert row["schedule_file"] == f"schedules/{row['layout']}/{row['schedule']}.json"
    csv = pd.read_csv(tmp_path / "pareto.csv")
    assert csv["schedule_file"].dropna().tolist() == has["schedule_file"].tolist()
    point = has[has["source"] == "solver"].iloc[-1]
    capsys.readouterr()
    assert main(["check", str(tmp_path / point["schedule_file"]), "--json"]) == 0  # no instance
    assert json.loads(capsys.readouterr().out)["makespan"] == point["makespan"]


def test_relayout_keeps_resident_weights_step_and_replica_figures():
    # the re-cut once dropped memory.params (every other layout held no weights) and kept the
    # step's and the replicas' per-stage lists at the old length (the sweep stopped with
    # "step.optimizer: expected one time per model stage (4), got a list of 2")
    inst = load_instance({"devices": 2, "microbatches": 4, "times": {"F": 1, "I": 1, "W": 1},
                          "memory": {"activation": 1, "params": [0.5, 0.3], "limit": 4},
                          "step": {"mode": "sync", "optimizer": [1, 2], "allreduce": 0.5}})
    two = relayout(inst, Layout(2, "loop"))
    assert sum(two.params[:4]) == pytest.approx(0.8) and two.params[:4] == (0.3, 0.2, 0.15, 0.15)
    assert sum(two.step.optimizer[:4]) == pytest.approx(3)
    assert sum(two.step.allreduce[:4]) == pytest.approx(1)
    assert relayout(two, Layout(1, "loop")).params[:2] == inst.params[:2]
    replicas = load_instance({"devices": 2, "microbatches": 4, "replicas": 2, "sync": [1, 3],
                              "times": {"F": 1, "I": 1, "W": 1}, "memory": {"activation": 1}})
    assert sum(relayout(replicas, Layout(2, "loop")).sync[:4]) == pytest.approx(4)


def test_segment_lengths_follow_a_new_segment_count_or_say_why_not():
    # a list of lengths was kept for another count: even the reference peak (one segment)
    # failed with "segment_lengths: expected 1 lengths (one per segment), got 2"
    inst = load_instance({"devices": 2, "microbatches": 4, "segments": 2,
                          "segment_lengths": [0.6, 0.4], "times": {"F": 1, "I": 1, "W": 1},
                          "memory": {"activation": 1}})
    assert reference_peak(inst) == reference_peak(inst.with_(segments=1))
    assert inst.with_(segments=1).segments == 1
    with pytest.raises(InstanceError, match=r"segment_lengths: \[0.6, 0.4\] gives 2 segments, "
                                            "not 4; give a rule"):
        relayout(inst, Layout(1, "loop", 4))
    assert relayout(inst.with_(segment_lengths="equal"), Layout(1, "loop", 4)).segments == 4
