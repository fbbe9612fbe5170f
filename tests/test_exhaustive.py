"""The branch and bound over device orders (``zbsolve.solver.exhaustive``): an optimum that owes
nothing to the CP-SAT model, so the model, its symmetry breaking and the bounds are checked
against the instance itself."""

from __future__ import annotations

import pytest
from conftest import make_instance
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import SMALL_26, UNREDUCED, optimum, tiny_multichunk
from test_relaxation import RELAX_WINS, relax_bounds

from zbsolve.baselines import generate
from zbsolve.instance import load_instance
from zbsolve.simulate import validate
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.exhaustive import refusal, solve_exhaustive

# the ZB-V row's 6.2B times (zbsolve/data/instances/zbv-arxiv) at p = 2, limit 2p (1F1B's)
ZBV_TIMES = {"devices": 2, "chunks": 2, "placement": "v",
             "times": {"F": 14.41, "I": 14.38, "W": 9.68}, "comm": 1.61,
             "memory": {"activation": 1, "weight": 0.432, "limit": 4}}


def exact(inst, objective, **kw):
    res = solve_exhaustive(inst, objective, **kw)
    assert res.proven and res.schedule is not None
    assert validate(inst, res.schedule).value(objective) == pytest.approx(res.value)
    return res.value


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tiny_multichunk().filter(lambda inst: inst.microbatches == 2),
       st.sampled_from(["makespan", "span"]))
def test_cp_sat_and_the_order_search_agree_on_the_optimum(inst, objective):
    best = exact(inst, objective, symmetry=False)
    # CP-SAT's model without and with its reductions (microbatch order, memory precedences)
    assert optimum(inst, objective, **UNREDUCED) == pytest.approx(best)
    assert optimum(inst, objective) == pytest.approx(best)
    # the search's own microbatch order loses nothing either, and no bound passes the optimum
    # (the analytic one, each device's relaxation)
    assert exact(inst, objective) == pytest.approx(best)
    assert analytic_bound(inst, objective) <= best + 1e-9
    assert max(relax_bounds(inst, objective)[0]) <= best + 1e-9


@pytest.mark.parametrize("data, value", [(SMALL_26, 40.0), (RELAX_WINS, 64.0)])
def test_known_optima(data, value):
    # SMALL_26: the W edge decides (test_bounds); RELAX_WINS: device 0's relaxation proves 64
    assert exact(load_instance(data), "makespan") == value


@pytest.mark.parametrize("m, zbv, symmetry, nodes", [(3, 241.99, False, 10_000),
                                                     (4, 318.93, True, 400_000)])
def test_no_schedule_beats_the_published_zb_v_at_two_devices(m, zbv, symmetry, nodes):
    # CP-SAT proves these with its bound search (test_bound_search: m = 6), on our model; the
    # search confirms it on the instance, 2.5 % above the bound: at m = 3 over every order, at
    # m = 4 over the orders in microbatch order (the model's assumption too; over every order
    # it runs out of 3 million nodes)
    inst = load_instance({**ZBV_TIMES, "microbatches": m})
    value = validate(inst, generate("zb-v", inst)).value("span")
    assert value == pytest.approx(zbv, abs=0.005)
    res = solve_exhaustive(inst, "span", upper=value, symmetry=symmetry, max_nodes=nodes)
    assert res.proven and res.schedule is None and res.value == value
    assert analytic_bound(inst, "span") < value - 7


def test_an_upper_value_is_beaten_only_by_a_better_schedule():
    inst = load_instance(SMALL_26)
    at = solve_exhaustive(inst, "makespan", upper=40.0)
    assert at.proven and at.schedule is None and at.value == 40.0
    above = solve_exhaustive(inst, "makespan", upper=41.0)
    assert above.proven and above.value == 40.0
    assert validate(inst, above.schedule).makespan == pytest.approx(40.0)


def test_the_node_budget_ends_the_search_unproven():
    inst = load_instance({**ZBV_TIMES, "microbatches": 4})
    res = solve_exhaustive(inst, "span", max_nodes=50)
    assert not res.proven and res.nodes == 51
    if res.schedule is not None:  # what it found is a schedule, valid and as good as it says
        assert validate(inst, res.schedule).value("span") == pytest.approx(res.value)


@pytest.mark.parametrize("extra, words", [
    ({"recompute": {"R": 1.0, "kept": 0.5}}, "memory modes"),
    ({"replicas": 2}, "two replicas"),
    ({"overlap": {"FB": 0.8}}, "overlapped"),
])
def test_what_it_cannot_time_is_refused_in_one_line(extra, words):
    inst = make_instance(p=2, m=2, **extra)
    assert words in refusal(inst)
    with pytest.raises(ValueError, match=words):
        solve_exhaustive(inst)


def test_the_step_boundary_and_unknown_objectives_are_refused():
    inst = make_instance(p=2, m=2).with_(step={"mode": "sync", "optimizer": 3, "allreduce": 1,
                                               "check": 2})
    assert "step" in refusal(inst)
    assert "above the 400" in refusal(make_instance(p=4, m=40))  # 480 ops
    assert refusal(make_instance(p=2, m=2)) is None
    with pytest.raises(ValueError, match="objective"):
        solve_exhaustive(make_instance(p=2, m=2), "bubble")



# found by the search on random explicit placements (1 of 36 and 1 of 58 instances, scratch
# runs) when the simulator measured a span from a device's first start and the model pinned
# that start to the device's head: a device that started late (a later microbatch's forward
# first) was shorter than the model allowed (49 vs 51; 57 where solve called 58 optimal). Spans
# now run from the heads in every layer (TaskGraph.device_heads)
LATE_START = {"devices": 3, "microbatches": 2, "chunks": 2, "placement": [0, 1, 0, 2, 1, 2],
              "times": {"F": [4, 1, 1, 1, 4, 3], "I": [1, 3, 1, 2, 1, 4],
                        "W": [2, 4, 4, 1, 3, 1]},
              "comm": 1, "memory": {"activation": 1.0, "weight": 0.5}}
OUT_OF_ORDER = {"devices": 3, "microbatches": 3, "chunks": 2, "placement": [1, 0, 2, 0, 2, 1],
                "times": {"F": [1, 3, 4, 3, 1, 2], "I": [2, 3, 2, 3, 4, 2],
                          "W": [3, 1, 4, 3, 4, 2]},
                "comm": 0, "memory": {"activation": 1.0, "weight": 0.5}}


@pytest.mark.parametrize("data, value", [(LATE_START, 49.0), (OUT_OF_ORDER, 58.0)])
def test_the_late_start_instances_have_one_span_optimum_in_every_layer(data, value):
    inst = load_instance(data)
    # every order, microbatch order, the model without and with its reductions, solve
    assert exact(inst, "span", symmetry=False) == value == exact(inst, "span")
    assert optimum(inst, "span", **UNREDUCED) == value == optimum(inst, "span")
    res = solve(inst, SolveOptions(time_limit=10, objective="span", workers=1, seed=0))
    assert res.status == "optimal" and res.objective_value == pytest.approx(value)
    assert analytic_bound(inst, "span") <= value
