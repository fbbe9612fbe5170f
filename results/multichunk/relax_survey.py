"""Which one-device relaxations are cheap, and what they add to the analytic bound (issue 18,
sixteenth pass): the survey behind ``solve``'s relaxations first (docs/solver.md).

For every instance of a random family (``zbsolve.bench.random_family``, seed 0), each candidate
device's relaxation (``relaxation.candidates``, ``relax_device``) for at most SECONDS, makespan,
2 workers, seed 0, no bound passed on from one device to the next:

    python results/multichunk/relax_survey.py random 1
    python results/multichunk/relax_survey.py random-tight 1
    python results/multichunk/relax_survey.py random 1 '{"subsolvers": ["objective_lb_search"]}'

(the optional third argument: CP-SAT parameters for every relaxation, ``relax_device``'s
``params``; the twenty-sixth pass's comparison).
One line per instance: the analytic bound, then ``device:bound`` per relaxation (``*`` where it
was proven) with its seconds, then the time for all of them; a last line counts the runs, the
proven ones and the instances whose best relaxation is above the analytic bound.
"""

from __future__ import annotations

import json
import sys
import time

from zbsolve.bench import random_family
from zbsolve.solver import relaxation
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.model import TimeScale

USAGE = "usage: relax_survey.py random|random-tight SECONDS [PARAMS_JSON]"


def main(argv: list[str]) -> int:
    try:
        family, seconds, *more = argv
        params = json.loads(more[0]) if more else None
        assert len(more) <= 1 and (params is None or isinstance(params, dict))
        tight = {"random": False, "random-tight": True}[family]
        seconds = float(seconds)
        assert seconds > 0
    except (ValueError, KeyError, AssertionError):  # (json's errors are ValueErrors)
        print(USAGE, file=sys.stderr)
        return 1
    runs = proven = raised = 0
    for inst in random_family(tight=tight):
        scale = TimeScale.choose(inst)
        analytic = analytic_bound(inst, "makespan")
        cells, best, t0 = [], analytic, time.perf_counter()
        for d in relaxation.candidates(inst):
            r = relaxation.relax_device(inst, "makespan", d, seconds, scale=scale,
                                         params=params)
            bound = r.bound / scale.time / (1 + scale.time_error)
            cells.append(f"{d}:{bound:.2f}{'*' if r.proven else ''}({r.seconds:.1f})")
            runs, proven, best = runs + 1, proven + r.proven, max(best, bound)
        raised += best > analytic + 1e-9
        print(inst.name, f"analytic={analytic:.2f}", " ".join(cells),
              f"[{time.perf_counter() - t0:.1f}s]", flush=True)
    print(f"{runs} relaxations, {proven} proven; best above the analytic bound on {raised} "
          "instances")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
