"""``solve --fused-backward``: the best schedule for a runtime without the I/W split."""

from __future__ import annotations

import json
import random

import pytest
from conftest import INSTANCES, make_instance, random_valid_schedule

from zbsolve.baselines import generate
from zbsolve.cli import main
from zbsolve.export.files import load_schedule
from zbsolve.instance import load_instance
from zbsolve.ops import Kind
from zbsolve.simulate import simulate, validate
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.fused import fuse_every_backward, fused_problem, only_fused, solve_fused

OPTS = SolveOptions(time_limit=20, workers=2, seed=0)


def test_fused_problem_moves_w_into_i_segment_by_segment():
    inst = make_instance(p=2, m=2, F=[1.0, 2.0], I=[1.0, 1.5], W=[0.5, 0.25])
    red = fused_problem(inst)
    assert red.I == (1.5, 1.75) and red.W == (0.0, 0.0) and red.F == inst.F
    assert red.duration("B", 1) == inst.duration("B", 1) == 1.75


@pytest.mark.parametrize("seed", range(6))
def test_any_schedule_of_the_fused_problem_converts_never_later(seed):
    """The reduction's second half: a schedule of the fused problem, each I run as B where it
    stands and each W dropped, is valid on the instance itself, never later, never more memory."""
    rng = random.Random(seed)
    inst = make_instance(p=rng.randint(1, 4), m=rng.randint(1, 5), v=rng.randint(1, 2),
                         F=rng.uniform(0.5, 2), I=rng.uniform(0.5, 2), W=rng.uniform(0.1, 1),
                         comm=rng.choice([0.0, 0.3]), activation=1.0, weight=0.4)
    red = fused_problem(inst)
    for _ in range(5):
        sched = random_valid_schedule(red, rng, fuse_prob=0.3)
        on_red = simulate(red, sched)
        fused = fuse_every_backward(sched)
        assert only_fused(fused)
        on_inst = validate(inst, fused)
        assert on_inst.makespan <= on_red.makespan + 1e-9
        assert all(a <= b + 1e-9 for a, b in zip(on_inst.peak_memory, on_red.peak_memory))


def test_uniform_costs_fused_optimum_is_1f1b_and_the_split_beats_it():
    """F = I = W = 1, no comm: with whole backwards nothing beats (m + p - 1)(F + B); the solver
    proves it; the split problem (ZB) is strictly shorter."""
    inst = make_instance(p=4, m=8)
    fused = solve_fused(inst, OPTS)
    assert only_fused(fused.schedule)
    assert fused.objective_value == pytest.approx((8 + 4 - 1) * 3)
    assert fused.status == "optimal" and fused.gap == pytest.approx(0.0, abs=1e-9)
    assert fused.baseline in {"1f1b", "gpipe"} and all(only_fused(r.schedule)
                                                        for r in fused.baselines)
    split = solve(inst, OPTS)
    assert split.objective_value < fused.objective_value - 1


def test_fused_answer_meets_its_memory_limit_and_beats_or_ties_fused_baselines():
    inst = load_instance(INSTANCES / "default.yaml")
    result = solve_fused(inst, SolveOptions(time_limit=15, workers=2, seed=0))
    sim = validate(inst, result.schedule)
    assert sim.feasible and only_fused(result.schedule)
    one = simulate(inst, generate("1f1b", inst))
    assert result.objective_value <= one.makespan + 1e-6
    assert result.lower_bound <= result.objective_value + 1e-9
    assert result.schedule.meta["instance"] == inst.to_dict()  # the real instance, not the reduced


def test_cli_fused_backward_writes_a_schedule_torch_1f1b_runtimes_can_run(tmp_path, capsys):
    out = tmp_path / "s.json"
    code = main(["solve", str(INSTANCES / "default.yaml"), "--fused-backward", "--time-limit",
                 "10", "--workers", "1", "-o", str(out), "--json"])
    assert code == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["fused_backward"] is True
    sched = load_schedule(out)
    assert only_fused(sched) and any(op.kind == Kind.B for op in sched.ops())
    names = {r["name"] for r in answer["schedules"] if r["status"] == "hand-made"}
    assert names and not names & {"zb-h1", "zb-h2", "zb-v"}  # no split family compared
    csv = tmp_path / "s.csv"
    assert main(["export", str(out), "--format", "torch-csv", "-o", str(csv)]) == 0
    assert only_fused(load_schedule(csv))


def test_a_fused_hint_is_taken_and_the_answer_is_never_worse():
    inst = make_instance(p=3, m=6, F=1.0, I=1.5, W=0.5, comm=0.2, activation=1.0, weight=0.3)
    hint = generate("1f1b", inst)
    result = solve_fused(inst, SolveOptions(time_limit=5, workers=1, seed=0), [hint])
    assert only_fused(result.schedule)
    assert result.objective_value <= simulate(inst, hint).makespan + 1e-9
