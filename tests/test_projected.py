"""The relaxation with its free devices projected out (``zbsolve.solver.projected``): the
same optimum as the full relaxation, and a schedule of the relaxation from the kept ops."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import tiny_multichunk
from test_relaxation import PAIR_WINS, RELAX_WINS

from zbsolve.instance import load_instance
from zbsolve.solver import projected, relaxation
from zbsolve.solver.cpsat import new_solver
from zbsolve.solver.model import TimeScale


def both(inst, objective, device, also=()):
    scale = TimeScale.choose(inst)
    return [relaxation.relax_device(inst, objective, device, 20, scale=scale, also=also,
                                    workers=1, seed=0, project=p) for p in (True, False)]


def objective_of(pm, starts, objective):
    """The objective of a complete start map, as the model defines it."""
    heads = [int(round(h)) for h in pm.graph.device_heads()]
    ends: dict[int, int] = {}
    for op, s in starts.items():
        d = pm.graph.device(op)
        ends[d] = max(ends.get(d, 0), s + pm.duration(op))
    if objective == "makespan":
        return max(ends.values())
    return max(e - heads[d] for d, e in ends.items())


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]), st.integers(0, 2),
       st.booleans())
def test_the_projection_keeps_the_relaxations_optimum(inst, objective, device, pair):
    device %= inst.devices
    also = ((device + 1) % inst.devices,) if pair and inst.devices > 2 else ()
    p, full = both(inst, objective, device, also)
    assert p.proven and full.proven
    assert p.bound == full.bound == p.value == full.value
    assert sorted(p.order) == sorted(relaxation.TaskGraph(inst).device_ops(device))


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]), st.integers(0, 2))
def test_the_kept_ops_extend_to_a_schedule_of_the_relaxation(inst, objective, device):
    device %= inst.devices
    scale = TimeScale.choose(inst)
    pm = projected.build(inst, objective, [device], scale=scale)
    solver = new_solver(20, workers=1, seed=0)
    solver.solve(pm.model)
    kept = {op: solver.value(v) for op, v in pm.start.items()}
    starts = pm.complete(kept)
    assert {op: starts[op] for op in kept} == kept and len(starts) == len(pm.ops)
    index = {op: i for i, op in enumerate(pm.ops)}
    for op, ps in zip(pm.ops, pm.preds):  # every precedence of the relaxation holds
        for j, w in ps:
            assert starts[op] >= starts[pm.ops[j]] + w
    assert all(starts[op] >= pm.head[index[op]] for op in pm.ops)
    assert objective_of(pm, starts, objective) <= solver.objective_value


def test_known_relaxations_keep_their_values_projected():
    # tests/test_relaxation.py's instances: device 0 proves 64, the pair (1, 2) 147
    inst = load_instance(RELAX_WINS)
    p, full = both(inst, "makespan", 0)
    assert p.bound == full.bound == 64 * TimeScale.choose(inst).time
    inst = load_instance(PAIR_WINS)
    p, full = both(inst, "makespan", 1, (2,))
    assert p.bound == full.bound == 147 * TimeScale.choose(inst).time
    assert [d for d, _ in p.overload] == [0]


def two_replicas():
    from zbsolve.bench_bidirectional import _two_replicas
    return _two_replicas(4, 4, None)


@pytest.mark.parametrize("inst, symmetry", [
    # step tails: one at a time per device
    (load_instance({**RELAX_WINS, "step": {"mode": "sync", "optimizer": 1}}), True),
    (load_instance(RELAX_WINS), False),  # no microbatch order: no chains to project
    (two_replicas(), True),  # Chimera: a device's first start is the earlier of two forwards
])
def test_the_projection_is_refused_where_the_free_ops_are_not_a_precedence_system(
        inst, symmetry):
    scale = TimeScale.choose(inst)
    assert projected.build(inst, "makespan", [0], scale=scale, symmetry=symmetry) is None
    assert projected.build(load_instance(RELAX_WINS), "makespan", [0], scale=scale) is not None


@pytest.mark.parametrize("cap", ["MAX_CELLS", "MAX_LINKS"])
def test_the_projection_is_refused_above_its_memory_caps(monkeypatch, cap):
    inst = load_instance(RELAX_WINS)
    scale = TimeScale.choose(inst)
    monkeypatch.setattr(projected, cap, 3)
    assert projected.build(inst, "makespan", [0], scale=scale) is None
    # and the relaxation falls back to the full model, with the same optimum
    r = relaxation.relax_device(inst, "makespan", 0, 20, scale=scale, workers=1, seed=0)
    assert r.proven and r.bound == 64 * scale.time
