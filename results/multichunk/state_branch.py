"""The memory-state bound (``zbsolve.solver.state_bound``; docs/solver.md, "Branching on a
forward's memory state") on its own, outside ``solve``: issue 18's ZB-V and V rows.

    python results/multichunk/state_branch.py zbv 4 16            # ZB-V's 6.2B times, limit 2p
    python results/multichunk/state_branch.py rows 60 'zbv/*'     # bench cases, 60 s each
    python results/multichunk/state_branch.py check 1 40          # random V instances vs solve
    python results/multichunk/state_branch.py check 4 20 4        # the same with p = 4

``zbv P M`` prints the bound at the V's tip next to the analytic bound and the published ZB-V
schedule's span; ``rows SECONDS PATTERN...`` the same for ``zbsolve bench`` cases, the search
cut at SECONDS; ``check SEED COUNT [P,...]`` compares it with ``solve``'s value (30 s, span,
without the state bound) on random small V instances (p = 2 or 3 unless P names others) and
flags any bound above it. Until 303c5c1 this script held a prototype that walked every
threshold vector (the twenty-fourth pass's outputs); the solver's box search gives the same
values (tests/test_state_bound.py checks it against a walk of every vector).
"""

from __future__ import annotations

import random
import sys
import time

from zbsolve.baselines import generate
from zbsolve.instance import Instance, load_instance
from zbsolve.simulate import simulate
from zbsolve.solver import bounds
from zbsolve.solver.state_bound import state_bound


def _line(name: str, inst: Instance, seconds: float | None = None) -> str:
    sim = simulate(inst, generate("zb-v", inst))
    deadline = None if seconds is None else time.monotonic() + seconds
    got = state_bound(inst, "span", deadline=deadline)
    zbv = (f"ZB-V {sim.max_span:.2f} (gap {(sim.max_span - got.value) / sim.max_span:.3%})"
           if sim.feasible else "ZB-V above the limit")
    return (f"{name}: analytic bound {bounds.analytic_bound(inst, 'span'):.2f}, state bound "
            f"{got.value:.2f} ({'every vector' if got.exact else 'cut'}, {got.boxes} boxes, "
            f"{got.seconds:.1f} s), {zbv}")


def _check(seed: int, count: int, devices: list[int]) -> None:
    from zbsolve.solver import SolveOptions, solve

    rng, above = random.Random(seed), 0
    for i in range(count):
        p, m = rng.choice(devices), rng.choice([3, 4, 5])
        f, b, w = (rng.randint(1, 5) for _ in range(3))
        comm, kept = rng.choice([0, 1, 2]), rng.choice([0.25, 0.5, 0.75])
        limit = rng.choice([2 * p, 2 * p + 1, 2 * p + 2])
        inst = load_instance({
            "name": f"v{i}", "devices": p, "microbatches": m, "chunks": 2, "placement": "v",
            "times": {"F": f, "I": b, "W": w}, "comm": comm,
            "memory": {"activation": 1, "weight": kept, "limit": limit}})
        value = state_bound(inst, "span").value
        res = solve(inst, SolveOptions(time_limit=30, objective="span", workers=2, seed=0,
                                       state_bound=False))
        flag = ""
        if value > res.objective_value + 1e-6:
            above += 1
            flag = "  <- ABOVE a schedule's span: the bound is wrong"
        print(f"{i}: p={p} m={m} F,I,W={f},{b},{w} comm={comm} weight={kept} limit={limit}: "
              f"analytic {bounds.analytic_bound(inst, 'span'):.2f}, state bound {value:.2f}, "
              f"solve {res.status} {res.objective_value:.2f} / {res.lower_bound:.2f}{flag}",
              flush=True)
    print(f"{count} instances, {above} with the bound above a schedule")


def main(args: list[str]) -> None:
    usage = ("usage: state_branch.py zbv P M | state_branch.py rows SECONDS PATTERN... | "
             "state_branch.py check SEED COUNT [P,...]")
    try:
        numbers = [int(x) for x in args[1:3]] if args[:1] != ["rows"] else [int(args[1])]
        devices = ([int(x) for x in args[3].split(",")] if len(args) == 4 and args[0] == "check"
                   else [2, 3])
    except (ValueError, IndexError):
        sys.exit(usage + " (whole numbers)")
    if args[:1] == ["zbv"] and len(args) == 3 and min(numbers) >= 1:
        sys.path.insert(0, "results/multichunk")
        from zbv_idle import six_b_times

        p, m = numbers
        print(_line(f"p = {p}, m = {m}", six_b_times(p, m)), flush=True)
    elif args[:1] == ["rows"] and len(args) >= 3 and numbers[0] > 0:
        from zbsolve import bench

        cases = bench.select(bench.build_cases(), args[2:])
        if not cases:
            sys.exit(f"state_branch.py rows: no bench case matches {args[2:]}")
        for case in cases:
            print(_line(case.id, case.inst, numbers[0]), flush=True)
    elif args[:1] == ["check"] and len(args) in (3, 4) and numbers[1] >= 1 and min(devices) >= 1:
        _check(numbers[0], numbers[1], devices)
    else:
        sys.exit(usage + " (P, M, COUNT, SECONDS and each P at least 1)")


if __name__ == "__main__":
    main(sys.argv[1:])
