"""The overlapped DualPipe rows with and without the unpaired instance solved first.

Usage: python results/bidirectional/unpaired_first.py SECONDS FACTOR[,FACTOR...] [CASES]

For each overlapped row of ``zbsolve bench`` (CASES: comma-separated globs, default the
DualPipe rows of m = 16 with F&B pairs) and each FACTOR (0: the row's own limit; else every
limit at FACTOR x the least feasible one, ``min_memory_limit``): ``solve`` with
``unpaired_first`` off and on (2 workers, seed 0, SECONDS of CP-SAT's deterministic time: the
same answer on a loaded machine), value, bound and what the phase found. One JSON line each
(issue 18, docs/solver.md, "Without pairs first").
"""

from __future__ import annotations

import json
import sys
import time

from replica_edges import limited_rows  # the sibling script (its folder is on sys.path)

from zbsolve.solver.api import SolveOptions, solve


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    for seconds, case, f, inst in limited_rows(argv, "dualpipe/*-m16-fb0.8",
                                               lambda inst: inst.overlap is not None):
        for on in (False, True):
            t0 = time.monotonic()
            res = solve(inst, SolveOptions(objective=case.objective, time_limit=seconds,
                                           workers=2, seed=0, deterministic=True,
                                           unpaired_first=on))
            print(json.dumps({
                "case": case.id, "factor": f, "unpaired_first": on,
                "value": round(res.objective_value, 2), "bound": round(res.lower_bound, 2),
                "gap": round(res.gap, 4), "status": res.status,
                "phase": res.schedule.meta["solver"].get("unpaired_first"),
                "wall": round(time.monotonic() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
