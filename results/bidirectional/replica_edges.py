"""The two-replica bench rows under tight memory: analytic bound and a solve, per row and limit.

Usage: python results/bidirectional/replica_edges.py SECONDS FACTOR[,FACTOR...] [CASES]

For each Chimera / DualPipe row of ``zbsolve bench`` (CASES: comma-separated globs, default
the Chimera rows and the overlapped DualPipe rows of m = 16; the plain DualPipe rows are
the Chimera instances) and each FACTOR, the instance with its limits at FACTOR x the least feasible ones
(``min_memory_limit``): the analytic bound, then ``solve`` (2 workers, seed 0, SECONDS of
CP-SAT's deterministic time: the same answer on a loaded machine) with its value, bound, gap
and status. One JSON line each. Run it on two checkouts (``PYTHONPATH``) to compare codes
(issue 18: memory edges per replica, dual feasible memory-time).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from zbsolve.bench import build_cases
from zbsolve.instance import Instance
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound, min_memory_limit


def limited_rows(argv: list[str], default: str, keep: Callable[[Instance], bool]
                 ) -> Iterator[tuple[float, Any, float, Instance]]:
    """(SECONDS, case, FACTOR, instance) for ``SECONDS FACTOR[,FACTOR...] [CASES]``: each bench
    case matching CASES (comma-separated globs, else ``default``) that ``keep`` accepts, at
    each FACTOR x its least feasible limits (0: its own limits). Also read by
    ``unpaired_first.py``."""
    seconds = float(argv[0])
    factors = [float(f) for f in argv[1].split(",")]
    patterns = (argv[2] if len(argv) > 2 else default).split(",")
    for case in build_cases():
        if not keep(case.inst) or not any(fnmatch.fnmatch(case.id, p) for p in patterns):
            continue
        need = min_memory_limit(case.inst)
        for f in factors:
            yield seconds, case, f, (case.inst if f == 0 else
                                     case.inst.with_(limit=[x * f for x in need]))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    for seconds, case, f, inst in limited_rows(argv, "chimera/*-m16,dualpipe/*-m16-fb0.8",
                                               lambda inst: inst.replicas == 2):
        res = solve(inst, SolveOptions(objective=case.objective, time_limit=seconds,
                                       workers=2, seed=0, deterministic=True))
        print(json.dumps({"case": case.id, "factor": f,
                          "analytic": round(analytic_bound(inst, case.objective), 2),
                          "value": round(res.objective_value, 2),
                          "bound": round(res.lower_bound, 2),
                          "gap": round(100 * res.gap, 2), "status": res.status}),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
