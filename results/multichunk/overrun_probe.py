"""How far past its limit a solve ends, and how late CP-SAT answers its own (twenty-first pass).

Solves an instance file with ``zbsolve.solver.solve`` (span objective, the method named, the
default 2 workers and seed 0) and prints the limit, the solve's ``solve_time``, each
whole-model CP-SAT run's status and wall time, and the seconds the last three CP-SAT solvers
were given (``cpsat.new_solver``, spied on): a run that took longer than it was given
answered late.

    python results/multichunk/overrun_probe.py results/multichunk/twentyfirst/vmin-p16-m32.json 20 exact
"""

from __future__ import annotations

import math
import sys
import time

import zbsolve.solver.cpsat as cpsat
from zbsolve.instance import InstanceError, load_instance
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.api import METHODS

USAGE = "usage: overrun_probe.py INSTANCE SECONDS METHOD (auto, exact or large)"


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit(USAGE)
    given: list[float] = []
    real = cpsat.new_solver

    def spy(seconds: float, **kw):
        given.append(seconds)
        return real(seconds, **kw)

    try:
        inst, limit = load_instance(argv[0]), float(argv[1])
    except (InstanceError, ValueError) as err:
        sys.exit(f"{USAGE}: {err}")
    if not (limit > 0 and math.isfinite(limit)) or argv[2] not in METHODS:
        sys.exit(f"{USAGE}: SECONDS must be a finite number above 0 and METHOD one of "
                 f"{', '.join(METHODS)}, got {argv[1]!r} and {argv[2]!r}")
    cpsat.new_solver = spy
    t0 = time.perf_counter()
    result = solve(inst, SolveOptions(time_limit=limit, objective="span", method=argv[2]))
    print(f"{inst.name}: limit {limit:g}, solve_time {result.solve_time:.3f}, "
          f"wall {time.perf_counter() - t0:.3f}, value {result.objective_value:g}")
    for run in result.schedule.meta["solver"].get("cp_runs") or []:
        print(f"  {run['phase']}: {run['status']}, wall {run['wall']:.3f}")
    print("  given (the last three solvers):", ", ".join(f"{s:.3f}" for s in given[-3:]))


if __name__ == "__main__":
    main(sys.argv[1:])
