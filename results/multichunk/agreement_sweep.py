"""Does every layer agree on the optimum of small random multi-chunk instances? (issue 18)

Per instance and objective: the exhaustive search over every order and in microbatch order
(``zbsolve.solver.exhaustive``), CP-SAT on our model with its reductions (microbatch order,
memory precedences, the analytic bound as a floor), and the analytic bound, which must stay at
or below the optimum. A line per disagreement, then a count. The sweep that found the span
fault (twenty-second pass) was of this kind, by hand; this one is kept.

    python results/multichunk/agreement_sweep.py 60 0    # 60 instances from seed 0

Instances: p = 3 with two chunks (V, loop or an explicit placement) or p = 2 with two or
three, m = 2 or 3, integer times 1-4, comm 0 or 1, activations 1 or 2, weights 0 or half,
memory limits from the least feasible to ample. An instance whose search runs out of its node
budget is counted, not compared.
"""

from __future__ import annotations

import random
import sys
import time

from ortools.sat.python import cp_model

from zbsolve.instance import Instance, load_instance
from zbsolve.solver.bounds import analytic_bound, min_memory_limit
from zbsolve.solver.exhaustive import solve_exhaustive
from zbsolve.solver.model import build_model

NODES = 300_000  # per search; an instance that needs more is counted as out of nodes


def random_instance(rng: random.Random) -> Instance:
    p = rng.choice([2, 3])
    v = 2 if p == 3 else rng.choice([2, 3])
    kind = rng.choice(["v", "loop", "explicit"] if v == 2 else ["loop", "explicit"])
    n = p * v
    placement: str | list[int] = kind
    if kind == "explicit":
        placement = [d for d in range(p) for _ in range(v)]
        rng.shuffle(placement)
    act = [rng.choice([1.0, 2.0]) for _ in range(n)]
    data = {"devices": p, "microbatches": rng.choice([2, 3]), "chunks": v,
            "placement": placement,
            "times": {k: [rng.randint(1, 4) for _ in range(n)] for k in ("F", "I", "W")},
            "comm": rng.choice([0, 1]),
            "memory": {"activation": act, "weight": [a * rng.choice([0.0, 0.5]) for a in act]}}
    need = min_memory_limit(load_instance(data))
    data["memory"]["limit"] = [x + rng.choice([0, 0, 1, 2, 20]) for x in need]
    return load_instance(data)


def model_optimum(inst: Instance, objective: str) -> float | None:
    sm = build_model(inst, objective)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 30
    if solver.solve(sm.model) != cp_model.OPTIMAL:
        return None
    return solver.objective_value / sm.scale.time


def main(args: list[str]) -> None:
    try:
        count, seed = int(args[0]), int(args[1])
    except (IndexError, ValueError):
        sys.exit("usage: agreement_sweep.py COUNT SEED")
    if count < 1:
        sys.exit("agreement_sweep.py: COUNT must be at least 1")
    rng = random.Random(seed)
    compared = unproven = bad = 0
    t0 = time.perf_counter()
    for k in range(count):
        inst = random_instance(rng)
        print(f"instance {k}: p = {inst.devices}, v = {inst.chunks}, m = {inst.microbatches}, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        for objective in ("makespan", "span"):
            every = solve_exhaustive(inst, objective, symmetry=False, max_nodes=NODES)
            ordered = solve_exhaustive(inst, objective, max_nodes=NODES)
            if not (every.proven and ordered.proven):
                unproven += 1
                continue
            model = model_optimum(inst, objective)
            bound = analytic_bound(inst, objective)
            compared += 1
            values = (every.value, ordered.value, model)
            if model is None or max(values) - min(values) > 1e-6 or bound > every.value + 1e-9:
                bad += 1
                print(f"instance {k} {objective}: every order {every.value}, microbatch order "
                      f"{ordered.value}, model {model}, bound {bound}: {inst.to_dict()}",
                      flush=True)
    print(f"{compared} compared, {bad} disagree, {unproven} out of nodes "
          f"({count} instances x 2 objectives, seed {seed}, {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
