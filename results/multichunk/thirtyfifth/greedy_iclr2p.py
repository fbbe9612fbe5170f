"""The greedy's best schedule (``heuristic_schedule``) on every iclr-2p bench case: its value
and a hash of its orders, one JSON object. Run on two revisions and compared, it shows whether
a change of the greedy moved the start of those one-chunk solves (thirty-fifth pass: 8338eea,
before the last stop's greedy change, against today: none moved).

    python results/multichunk/thirtyfifth/greedy_iclr2p.py > OUT.json
"""

import hashlib
import json
import sys

from zbsolve.bench import build_cases
from zbsolve.solver.heuristic import heuristic_schedule

if len(sys.argv) != 1:
    print("usage: greedy_iclr2p.py (no arguments)", file=sys.stderr)
    sys.exit(2)
out = {}
for case in build_cases():
    if case.family == "iclr-2p":
        sched, result = heuristic_schedule(case.inst, case.objective)
        out[case.id] = [round(result.value(case.objective), 6),
                        hashlib.md5(str(sched.orders).encode()).hexdigest()[:8]]
print(json.dumps(out, indent=1))
