"""The step boundary (issue 15) in the model: instance fields, the task graph's jobs, the
simulator's figures (exact numbers worked out by hand), the tail rule, and the CLI's --step.

Mode none (the default) must leave every figure as it was: checked on every hand-made family
of the shipped default instance.
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import INSTANCES, make_instance, random_valid_schedule

from zbsolve.baselines import evaluate_all
from zbsolve.graph import GLOBAL_CHECK, TaskGraph
from zbsolve.instance import InstanceError, load_instance
from zbsolve.ops import Op, parse_op
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate
from zbsolve.step import MODES, StepError, StepSpec, for_mode, with_mode

STEP = {"optimizer": [2.0, 1.0], "allreduce": 0.5, "check": 1.0}


def two_stage(mode: str, comm: float = 0.0, **step) -> object:
    return make_instance(p=2, m=1, comm=comm, step={"mode": mode, **STEP, **step})


def one_f_one_b(inst) -> Schedule:
    """One microbatch through two stages, I then W on each."""
    return Schedule([[Op(k, d, 0) for k in "FIW"] for d in range(2)])


# ---------------------------------------------------------------------- instance
def test_step_fields_parse_round_trip_and_default_to_none():
    inst = make_instance(p=2, m=2, step={"mode": "sync", **STEP})
    assert inst.step == StepSpec("sync", (2.0, 1.0), (0.5, 0.5), 1.0)
    again = load_instance(inst.to_dict())
    assert again.step == inst.step
    plain = make_instance(p=2, m=2)
    assert plain.step == StepSpec() and not plain.step.active and "step" not in plain.to_dict()
    two = make_instance(p=2, m=2, replicas=2, sync=1.0, step={"optimizer": [3, 4]})
    assert two.step.optimizer == (3.0, 4.0, 3.0, 4.0)  # replica 1 repeats replica 0
    assert load_instance(two.to_dict()).step == two.step


@pytest.mark.parametrize("step, needle", [
    ({"mode": "async"}, "step.mode: expected one of none, sync, post-validation, got 'async'"),
    ({"optimiser": 1}, "step: unknown key(s) ['optimiser']"),
    ({"optimizer": [1, 2, 3]}, "step.optimizer: expected one time per model stage (2), got a "
                               "list of 3"),
    ({"allreduce": -1}, "step.allreduce: expected a time >= 0, got -1"),
    ({"check": "fast"}, "step.check: expected a time >= 0, got 'fast'"),
    ({"optimizer": [1, True]}, "step.optimizer[1]: expected a time >= 0, got True"),
    ("sync", "step: expected a mapping"),
])
def test_bad_step_fields_name_the_field(step, needle):
    with pytest.raises(InstanceError) as err:
        make_instance(p=2, m=2, step=step)
    assert needle in str(err.value)


def test_an_active_mode_needs_step_times():
    with pytest.raises(StepError, match="--step sync: the instance gives no step times"):
        for_mode(make_instance(p=2, m=2), "sync")
    inst = make_instance(p=2, m=2, step=STEP)
    assert for_mode(inst, None) is inst
    assert for_mode(inst, "post-validation").step.mode == "post-validation"


def test_mode_none_changes_no_figure():
    """The shipped default instance with a step section in mode none: every family's figures
    equal the instance's without it."""
    inst = load_instance(INSTANCES / "default.yaml")
    with_step = inst.with_(step={"mode": "none", "optimizer": 5.0, "allreduce": 2, "check": 1})
    assert TaskGraph(with_step).count() == TaskGraph(inst).count()
    for a, b in zip(evaluate_all(inst), evaluate_all(with_step)):
        if a.applicable:
            assert a.result.summary() == b.result.summary(), a.name


# ---------------------------------------------------------------------- graph
@pytest.mark.parametrize("mode", ["sync", "post-validation"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_step_jobs_and_their_rules(mode, replicas):
    extra = {"replicas": 2, "sync": 0.5} if replicas == 2 else {}
    inst = make_instance(p=2, m=4, v=2 if replicas == 1 else 1, step={"mode": mode, **STEP}
                         if replicas == 2 else {"mode": mode, "optimizer": 1.0, "check": 1.0},
                         **extra)
    g = TaskGraph(inst)
    ops = list(g.ops())
    assert g.count() == len(ops) == len(set(ops))
    assert all(g.exists(op) for op in ops) and not g.exists(Op("OPT", inst.stages, -1))
    S, n = inst.model_stages, inst.stages
    assert [op for op in ops if op.kind == "OPT"] == list(g.tail_ops())
    assert [op for op in ops if op.kind == "AR"] == [Op("AR", s, -1) for s in range(S)]
    assert all(g.device(op) is None for op in g.implicit_ops())
    assert [g.device(op) for op in g.tail_ops()] == list(inst.placement)
    mirror = {(q, op, c) for op in ops for q, c in g.preds(op)}
    assert mirror == {(op, q, c) for op in ops for q, c in g.succs(op)}
    topo = g.topological()
    assert sorted(topo) == sorted(ops)
    seen: set = set()
    for op in topo:  # a topological order, step jobs included
        assert all(q in seen for q, _ in g.preds(op)), op
        seen.add(op)
    for op in ops:  # the simulator's fast path agrees with succs
        assert set(g.implicit_successors(op)) == {q for q, _ in g.succs(op)
                                                  if g.device(q) is None}
    if replicas == 2:
        assert g.preds(Op("AR", 1, -1)) == [(Op("SYNC", 1, -1), 0.0)]
    else:
        assert len(g.preds(Op("AR", 1, -1))) == inst.microbatches  # every W of stage 1
    if mode == "sync":
        assert g.preds(Op("OPT", n - 1, -1)) == [(GLOBAL_CHECK, 0.0)]
        assert {q for q, _ in g.preds(GLOBAL_CHECK)} == {Op("AR", s, -1) for s in range(S)}
    else:
        assert g.preds(Op("OPT", n - 1, -1)) == [(Op("AR", (n - 1) % S, -1), 0.0)]
        assert g.preds(Op("NORM", 1, -1)) == [(Op("AR", 1, -1), 0.0),
                                               (Op("NORM", 0, -1), inst.hop(0, 1))]
        if replicas == 2:  # replica 1's chain starts again at its first stage
            assert g.preds(Op("NORM", S, -1)) == [(Op("AR", 0, -1), 0.0)]


def test_step_tokens_parse_and_print():
    assert str(GLOBAL_CHECK) == "CHECK" and parse_op("CHECK") == GLOBAL_CHECK
    for token in ("3OPT", "0AR", "2NORM"):
        assert str(parse_op(token)) == token


# ---------------------------------------------------------------------- simulator
def test_sync_step_by_hand():
    """p=2, m=1, F=I=W=1, comm 0, 1F1B: the pipeline ends at 5 (device 0's W), device 1's W
    at 4. AR: 5-5.5 and 4-4.5; CHECK 5.5-6.5; OPT(0) 6.5-8.5 and OPT(1) 6.5-7.5."""
    inst = two_stage("sync")
    r = simulate(inst, one_f_one_b(inst))
    assert r.end[Op("AR", 0, -1)] == 5.5 and r.end[Op("AR", 1, -1)] == 4.5
    assert (r.start[GLOBAL_CHECK], r.end[GLOBAL_CHECK]) == (5.5, 6.5)
    assert (r.start[Op("OPT", 0, -1)], r.end[Op("OPT", 0, -1)]) == (6.5, 8.5)
    assert (r.start[Op("OPT", 1, -1)], r.end[Op("OPT", 1, -1)]) == (6.5, 7.5)
    assert r.makespan == 8.5 and r.span == [8.5, 6.5]
    assert r.busy == [3 + 2.0, 3 + 1.0]  # the optimizer step is device work
    assert r.summary()["step"] == {"mode": "sync", "pipeline_end": 5.0, "boundary": 3.5}


def test_post_validation_step_by_hand():
    """Same pipeline with comm 1: device 0 ends at 7, device 1 at 5. Each stage steps after its
    own reduction: OPT(0) 7.5-8, OPT(1) 5.5-6.5. The partial state goes 0 -> 1: NORM(0) at 7.5,
    NORM(1) at max(5.5, 7.5 + 1) = 8.5, later than every OPT: the check's chain is the part on
    the critical path (makespan 8.5), and in no device's span."""
    inst = two_stage("post-validation", comm=1.0, optimizer=[0.5, 1.0])
    r = simulate(inst, one_f_one_b(inst))
    assert r.end[Op("OPT", 0, -1)] == 8.0 and r.start[Op("OPT", 1, -1)] == 5.5
    assert r.end[Op("NORM", 0, -1)] == 7.5 and r.end[Op("NORM", 1, -1)] == 8.5
    assert r.makespan == 8.5 and r.span == [8.0, 6.5 - 2.0]
    sync = simulate(with_mode(inst, "sync"), one_f_one_b(inst))
    assert sync.makespan == 7.5 + 1.0 + 1.0  # AR(0) end, CHECK, then OPT(1), the longer


def test_tail_runs_optimizer_steps_earliest_ready_first():
    """One device with both stages (p=1, v=2), m=1, unit times: the pipeline ends at 6, W(1) at
    4. AR(1) lasts 3 (ready 7), AR(0) 0 (ready 6): OPT(0) 6-7 first, then OPT(1) 7-9."""
    inst = make_instance(p=1, m=1, v=2, step={"mode": "post-validation", "optimizer": [1, 2],
                                              "allreduce": [0, 3]})
    order = [Op("F", 0, 0), Op("F", 1, 0), Op("I", 1, 0), Op("W", 1, 0), Op("I", 0, 0),
             Op("W", 0, 0)]
    r = simulate(inst, Schedule([order]))
    assert (r.start[Op("OPT", 0, -1)], r.end[Op("OPT", 1, -1)]) == (6.0, 9.0)
    assert r.makespan == 9.0 and r.span == [9.0]


def test_schedules_do_not_list_step_jobs():
    inst = two_stage("sync")
    sched = one_f_one_b(inst)
    sched.orders[0].append(Op("OPT", 0, -1))
    with pytest.raises(ScheduleError, match="0OPT is a step-boundary job; schedules do not list"):
        simulate(inst, sched)


@pytest.mark.parametrize("seed", range(6))
def test_random_orders_with_step_jobs(seed):
    """Random valid orders: every step job runs after its inputs, a device's optimizer steps
    after its last job and one at a time, the makespan is the last end of any job."""
    rng = random.Random(seed)
    p, v = rng.choice([(2, 1), (3, 2), (4, 1)])
    S = p * v
    mode = rng.choice(["sync", "post-validation"])
    inst = make_instance(p=p, m=rng.choice([2, 4]), v=v, comm=rng.choice([0.0, 0.3]),
                         F=[rng.choice([1, 2]) for _ in range(S)], W=0.5,
                         step={"mode": mode, "optimizer": [rng.choice([0, 1, 3]) for _ in range(S)],
                               "allreduce": rng.choice([0, 0.5]), "check": rng.choice([0, 2])})
    sched = random_valid_schedule(inst, rng)
    r = simulate(inst, sched)
    g = TaskGraph.of(inst, sched.ops())
    for op in g.ops():
        for q, c in g.preds(op):
            assert r.start[op] >= r.end[q] + c - 1e-9
    for d, order in enumerate(sched.orders):
        last = max(r.end[op] for op in order)
        tail = sorted(g.tail_ops(d), key=lambda o: r.start[o])
        assert all(r.start[o] >= last - 1e-9 for o in tail)
        assert all(r.start[b] >= r.end[a] - 1e-9 for a, b in zip(tail, tail[1:]))
    assert r.makespan == max(r.end.values())


# ---------------------------------------------------------------------- CLI
def test_cli_baselines_and_solve_with_step(tmp_path, capsys):
    from zbsolve.cli import main

    path = tmp_path / "inst.yaml"
    make_instance(p=2, m=4, F=1, I=1, W=1, step=STEP).dump(path)
    assert main(["baselines", str(path), "--step", "sync", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["1f1b"]["step"]["mode"] == "sync" and rows["1f1b"]["step"]["boundary"] == 3.5
    out = tmp_path / "s.json"
    assert main(["solve", str(path), "--step", "post-validation", "--time-limit", "5",
                 "--workers", "1", "-o", str(out), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["step"] == "post-validation" and answer["status"] == "optimal"
    assert main(["check", str(out), "--json"]) == 0  # the file carries its instance and mode
    checked = json.loads(capsys.readouterr().out)
    assert checked["makespan"] == pytest.approx(answer["objective_value"])
    plain = tmp_path / "plain.yaml"
    make_instance(p=2, m=4).dump(plain)
    assert main(["baselines", str(plain), "--step", "sync"]) == 2
    assert "--step sync: the instance gives no step times" in capsys.readouterr().err


def test_step_with_sequence_segments():
    """Seq1F1B on 2 devices, 2 segments, m=4 (F=I=W=2 per microbatch): the pipeline ends at 27.
    sync: + check 1 + optimizer 1; post-validation: the last device steps right away (comm 0,
    so the partial state's chain ends with it). AR waits for every segment's W."""
    from zbsolve.baselines import generate

    base = dict(name="seg", devices=2, microbatches=4, times=dict(F=2, I=2, W=2), comm=0,
                segments=2, step=dict(optimizer=1, check=1))
    ends = {}
    for mode in MODES:
        inst = load_instance({**base, "step": {**base["step"], "mode": mode}})
        ends[mode] = simulate(inst, generate("seq1f1b", inst)).makespan
        if mode != "none":
            graph = TaskGraph(inst)
            ar = next(op for op in graph.implicit_ops() if op.kind == "AR" and op.stage == 0)
            assert sorted(q for q, _ in graph.preds(ar)) == sorted(
                Op("W", 0, j, g) for j in range(4) for g in range(2))
    assert ends == {"none": 27, "sync": 29, "post-validation": 28}
