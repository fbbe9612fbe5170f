"""Behaviour tests that kill the simulator's mutants (results/mutation/README.md, part 2):
exact figures of a small run, and every rejection with its exact message."""

from __future__ import annotations

import pytest
from conftest import make_instance

from zbsolve.baselines.classic import one_f_one_b
from zbsolve.ops import Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate


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
