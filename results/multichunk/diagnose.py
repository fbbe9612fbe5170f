"""Bound or search? Solve members of the random multi-chunk family and log both curves.

usage: python results/multichunk/diagnose.py TIME_LIMIT 'CP_PARAMS_JSON' NAME [NAME ...]
e.g.   nice -n 10 .venv/bin/python results/multichunk/diagnose.py 60 '' random-01 random-25

One JSON line per instance: the solve's status, value and bounds, the analytic bound, and the
history of (elapsed s, incumbent, proven bound) that ``zbsolve.solver.progress`` records (every
improving solution and every bound move of CP-SAT), thinned to about 25 points plus the last.
A bound curve that stays at the analytic bound while the incumbent keeps falling says search;
both flat says the bound is weak, or the search is stuck (a longer run separates the two).
"""

import json
import sys
import time

from zbsolve.bench import random_family
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound


def main() -> None:
    limit = float(sys.argv[1])
    params = json.loads(sys.argv[2]) if sys.argv[2] else {}
    family = {inst.name: inst for inst in random_family()}
    for name in sys.argv[3:]:
        inst = family[name]
        t0 = time.perf_counter()
        analytic = analytic_bound(inst)
        res = solve(inst, SolveOptions(time_limit=limit, workers=2, seed=0, cp_params=params))
        hist = res.history
        thin = hist[:: max(1, len(hist) // 25)] + hist[-1:]
        print(json.dumps({
            "name": name, "p": inst.p, "m": inst.m, "v": inst.v, "status": res.status,
            "value": res.objective_value, "lower": round(res.lower_bound, 3),
            "analytic": round(analytic, 3), "cpsat": res.cpsat_bound and round(res.cpsat_bound, 3),
            "seconds": round(time.perf_counter() - t0, 1),
            "history": [[round(t, 1), v, round(b, 3)] for t, v, b in thin]}), flush=True)


if __name__ == "__main__":
    main()
