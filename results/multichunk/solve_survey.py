"""Solve bench cases one after the other with the default solve (plus OPTIONS) and print, per
case, the value, the bound, the gap, the proof time and what the bottleneck's order first did
(issue 18, twenty-ninth pass; ``api._bottleneck_first``): its device, the relaxed schedule's
length, whether that relaxation was proven, the incumbent's gap before it and the best value
after it (null: it found no schedule in its share).

    python results/multichunk/solve_survey.py 60 'random/*'
    python results/multichunk/solve_survey.py 60 'random-tight/*' '{"bottleneck_first": false}'
"""

from __future__ import annotations

import fnmatch
import json
import math
import sys

from zbsolve.bench import build_cases
from zbsolve.solver.api import SolveOptions, solve

USAGE = "usage: solve_survey.py SECONDS PATTERN [OPTIONS_JSON]"


def main() -> None:
    try:
        seconds, pattern = float(sys.argv[1]), sys.argv[2]
        extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    except (IndexError, ValueError):
        sys.exit(USAGE)
    if not (seconds > 0 and math.isfinite(seconds)) or not isinstance(extra, dict):
        sys.exit(USAGE)
    cases = [c for c in build_cases() if fnmatch.fnmatch(c.id, pattern)]
    if not cases:
        sys.exit(f"{USAGE}: no bench case matches {pattern!r}")
    for c in cases:
        try:
            options = SolveOptions(time_limit=seconds, objective=c.objective, **extra)
        except TypeError as err:
            sys.exit(f"{USAGE}: {err}")
        r = solve(c.inst, options)
        info = r.schedule.meta["solver"]
        proof = info.get("proof_time")
        print(f"{c.id:30s} {r.objective_value:9.1f} {r.lower_bound:9.1f} {100 * r.gap:6.2f}% "
              f"proof {'-' if proof is None else f'{proof:5.1f}'}  "
              f"bottleneck-first {json.dumps(info.get('bottleneck_first'))}", flush=True)


if __name__ == "__main__":
    main()
