"""The memory-state bound (``solver.state_bound``): never above a proven optimum, its box search
the exact minimum over the threshold vectors, ZB-V's small rows pinned, and the solver proving
them with it."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import UNREDUCED, optimum, tiny_multichunk

from zbsolve.graph import TaskGraph
from zbsolve.instance import load_instance
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver import state_bound as sb
from zbsolve.solver.bounds import analytic_bound


def six_b(p: int, m: int, **memory):
    """ZB-V's 6.2B per-chunk times (ZB-V paper's table) at limit 2p (one chunk activation = 1)."""
    return load_instance({
        "name": f"zbv-6.2b-p{p}-m{m}", "devices": p, "microbatches": m, "chunks": 2,
        "placement": "v", "times": {"F": 14.41, "I": 14.38, "W": 9.68}, "comm": 1.61,
        "memory": {"activation": 1, "weight": 0.432, "limit": 2 * p, **memory}})


def every_point(inst, e, t, objective):
    """The least bound over every threshold vector one by one (no boxes), or inf."""
    space = sb._Space(inst, e, t, inst.microbatches - 1)
    ends = sb._ends(space, t, [0] * len(space.classes), [space.n] * len(space.classes))
    ev = sb._Evaluator(inst, TaskGraph(inst), e, space, ends, objective)
    best = math.inf
    for a in itertools.product(range(space.n + 1), repeat=len(space.classes)):
        a = list(a)
        lo, hi = list(a), list(a)
        if space.tighten(lo, hi) and lo == a:
            got = ev.value(a, a, range(inst.devices))
            if got is not None:
                best = min(best, got[0])
    return best


@pytest.mark.parametrize("p, m, analytic, value", [
    (2, 4, 310.98, 318.93), (2, 6, 464.86, 472.81), (3, 4, 328.61, 336.26),
    (4, 8, 625.18, 663.11)])
def test_zbv_small_rows_are_pinned(p, m, analytic, value):
    # 318.93, 472.81, 336.26 and 663.11 are CP-SAT's proven optima (docs/solver.md)
    inst = six_b(p, m)
    assert analytic_bound(inst, "span") == pytest.approx(analytic)
    got = sb.state_bound(inst, "span")
    assert got.exact and got.value == pytest.approx(value)
    assert got.value == pytest.approx(every_point(inst, p - 1, p, "span"))


def test_the_search_stops_at_a_target_and_a_box_budget_with_a_valid_value():
    inst = six_b(4, 8)
    full = sb.state_bound(inst, "span")
    early = sb.state_bound(inst, "span", target=640.0)
    assert not early.exact and 640.0 <= early.value <= full.value
    cut = sb.state_bound(inst, "span", boxes=5)
    assert cut.boxes <= 6 and not cut.exact and cut.value <= full.value
    # gives up after ``patience`` boxes while it is no higher than a bound known otherwise
    idle = sb.state_bound(inst, "span", floor=700.0, patience=5)
    assert idle.boxes <= 6 and not idle.exact and idle.value <= full.value
    above = sb.state_bound(inst, "span", floor=600.0, patience=5)  # it rises above 600
    assert above.exact and (above.value, above.boxes) == (full.value, full.boxes)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiny_multichunk(), st.sampled_from(["makespan", "span"]))
def test_never_above_the_unreduced_optimum_at_any_device(inst, objective):
    best = optimum(inst, objective, **UNREDUCED)
    for e in range(inst.devices):
        t = max(inst.stages_of(e))
        got = sb.state_bound(inst, objective, at=(e, t))
        assert got is not None and got.exact
        assert got.value <= best + 1e-9, (e, t, got, best)
        assert got.value == pytest.approx(every_point(inst, e, t, objective))


def test_solve_proves_zbv_with_it_and_reports_it():
    inst = six_b(4, 16)
    res = solve(inst, SolveOptions(time_limit=30, objective="span", workers=1,
                                   deterministic=True, memory_tiebreak=False))
    assert res.status == "optimal" and res.objective_value == pytest.approx(1278.63)
    info = res.schedule.meta["solver"]["state_bound"]
    assert info["value"] == pytest.approx(1278.63) and res.relaxed_bound == info["value"]
    off = solve(inst, SolveOptions(time_limit=1, objective="span", workers=1,
                                   deterministic=True, memory_tiebreak=False,
                                   state_bound=False, stretch=False, windows=False))
    assert "state_bound" not in off.schedule.meta["solver"]
    assert off.lower_bound < 1278.63 - 1


def test_refuses_what_the_argument_does_not_cover():
    assert sb.state_bound(six_b(2, 4, limit=None), "span") is None  # no limit
    loop = load_instance({"devices": 2, "microbatches": 4, "chunks": 2, "placement": "loop",
                          "times": {"F": 1, "I": 1, "W": 1},
                          "memory": {"activation": 1, "limit": 4}})
    assert sb.v_tip(loop) is None and sb.state_bound(loop, "span") is None
    assert sb.state_bound(loop, "span", at=(1, 3)) is not None  # any forward, when asked
    assert "plain" in sb.applies(load_instance({**six_b(2, 4).to_dict(), "segments": 2}))
    assert sb.state_bound(six_b(4, 8), "span", max_cells=100) is None
    with pytest.raises(ValueError, match="objective"):
        sb.state_bound(six_b(2, 4), "bubble")


def test_solve_cli_can_skip_it(tmp_path, capsys):
    from zbsolve.cli import main

    path = tmp_path / "zbv.yaml"
    six_b(2, 4).dump(path)
    args = ["solve", str(path), "--objective", "span", "--deterministic", "--time-limit", "2",
            "--workers", "1", "--no-memory-tiebreak", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["relaxed_bound"] == pytest.approx(318.93) and out["status"] == "optimal"
    assert main([*args, "--no-state-bound", "--no-relax-first"]) == 0
    assert json.loads(capsys.readouterr().out)["relaxed_bound"] is None


@pytest.mark.parametrize("perm", [(1, 0, 3, 2), (3, 2, 1, 0)])
def test_a_v_whose_devices_are_numbered_otherwise_gets_the_same_bound(perm):
    # the bound reads which stages a device holds; an explicit placement that renumbers the
    # V's devices (limits following them) is the same pipeline, and was left without it
    inst = six_b(4, 8, limit=[10, 9, 8.5, 8])
    renumbered = inst.with_(placement=[perm[d] for d in inst.placement],
                            limit=[inst.limit[perm.index(d)] for d in range(4)])
    assert renumbered.placement_kind == "explicit"
    assert sb.v_tip(inst) == (3, 4) and sb.v_tip(renumbered) == (perm[3], 4)
    plain, other = sb.state_bound(inst, "span"), sb.state_bound(renumbered, "span")
    assert other.exact and other.value == pytest.approx(plain.value)
    assert plain.value > analytic_bound(inst, "span") + 1  # a bound that matters here
