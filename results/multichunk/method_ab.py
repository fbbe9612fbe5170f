"""One bench case solved with a given method (issue 18, nineteenth and twentieth passes: the whole
model against the window search on the large V rows; ``api._hands_over``). ``windows`` is the
large method without its handover to the whole model (``--no-handover``).

    python results/multichunk/method_ab.py exact 120 vmin/p16-m32 vhalf/p16-m64
    python results/multichunk/method_ab.py large 120 vmin/p16-m32
    python results/multichunk/method_ab.py windows 120 vmin/p16-m32

The same as ``zbsolve solve CASE --objective OBJ --method METHOD --time-limit SECONDS --workers 2
--seed 0 --progress`` on the bench's instance: the progress lines on stderr, then one line per
case (status, value, bound, the solve's own seconds, where the schedule came from).
"""

from __future__ import annotations

import math
import sys

from zbsolve.bench import build_cases
from zbsolve.solver.api import METHODS, SolveOptions, solve

CHOICES = (*METHODS, "windows")  # windows: the large method with handover=False


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in CHOICES:
        print(f"usage: method_ab.py {{{','.join(CHOICES)}}} SECONDS CASE...", file=sys.stderr)
        return 1
    method, ids = argv[0], argv[2:]
    try:
        seconds = float(argv[1])
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        print(f"method_ab.py: SECONDS must be a finite number >= 0, got {argv[1]!r}",
              file=sys.stderr)
        return 1
    cases = {c.id: c for c in build_cases()}
    missing = [i for i in ids if i not in cases]
    if missing:
        print(f"unknown bench case(s): {', '.join(missing)}", file=sys.stderr)
        return 1
    for cid in ids:
        case = cases[cid]
        r = solve(case.inst, SolveOptions(
            time_limit=seconds, objective=case.objective, workers=2, seed=0, progress=True,
            method="large" if method == "windows" else method, handover=method != "windows"))
        info = r.schedule.meta["solver"]
        print(f"{cid} {info['method']} {r.status} {r.objective_value:.2f} / {r.lower_bound:.2f} "
              f"gap {100 * r.gap:.3f}% {r.solve_time:.1f}s source {r.schedule.meta['source']}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
