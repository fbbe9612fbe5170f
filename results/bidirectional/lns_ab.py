"""The overlapped bench rows solved twice at SECONDS: the default options and CP-SAT's
``use_lns_only`` (issue 18: does the overlapped model find schedules faster by LNS alone?).
Prints per row value / lower bound and status of each arm.

    python results/bidirectional/lns_ab.py 20
"""

from __future__ import annotations

import math
import sys

from zbsolve.bench import build_cases
from zbsolve.solver.api import SolveOptions, solve

USAGE = "usage: lns_ab.py SECONDS"
ARMS = {"default": {}, "lns_only": {"cp_params": {"use_lns_only": True}}}


def main() -> None:
    try:
        seconds = float(sys.argv[1])
    except (IndexError, ValueError):
        sys.exit(USAGE)
    if not (seconds > 0 and math.isfinite(seconds)):
        sys.exit(USAGE)
    for c in build_cases():
        if c.inst.overlap is None:
            continue
        row = [c.id]
        for name, extra in ARMS.items():
            r = solve(c.inst, SolveOptions(time_limit=seconds, objective=c.objective, **extra))
            row.append(f"{name} {r.objective_value:.2f}/{r.lower_bound:.2f} {r.status}")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
