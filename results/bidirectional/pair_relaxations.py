"""Two bounds tried for DualPipe at 1.5 x its least memory, neither kept (issue 18, stop 55).

    python results/bidirectional/pair_relaxations.py SECONDS

- ``serial``: the instance with every F, I and W at its paired duration
  (``TaskGraph.min_duration``'s factor) and no pairs is a relaxation (each pair's interval
  holds its F then its backward, allocations and frees where the pair has them), solved by
  ``solve`` for SECONDS on dualpipe/p4-m8-fb0.8: its lower bound against the paired
  instance's analytic one.
- ``devices``: each device's one-device relaxation (``relaxation.relax_device``, not
  projected: the projection has no pairs) of dualpipe/p4-m16-fb0.8 for SECONDS: bound and
  whether it found a schedule.

2 workers, seed 0, wall clock.
"""

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from replica_edges import limited_rows  # noqa: E402

from zbsolve.graph import TaskGraph  # noqa: E402
from zbsolve.solver import relaxation  # noqa: E402
from zbsolve.solver.api import SolveOptions, solve  # noqa: E402
from zbsolve.solver.bounds import analytic_bound  # noqa: E402
from zbsolve.solver.model import TimeScale  # noqa: E402

try:
    seconds = float(sys.argv[1])
    assert len(sys.argv) == 2 and 0 < seconds and math.isfinite(seconds)
except (IndexError, ValueError, AssertionError):
    print(f"usage: pair_relaxations.py SECONDS (got {sys.argv[1:]})", file=sys.stderr)
    sys.exit(2)
for _, case, f, inst in limited_rows([str(seconds), "1.5", "dualpipe/p4-m8-fb0.8"], "",
                                     lambda i: True):
    fx, bx = TaskGraph(inst)._min_x
    n = inst.stages // inst.replicas  # times are per logical stage; take each copy's least x
    xf = [min(fx[k + r * n] for r in range(inst.replicas)) for k in range(n)]
    xb = [min(bx[k + r * n] for r in range(inst.replicas)) for k in range(n)]
    serial = inst.with_(overlap=None, times={"F": [inst.F[k] * xf[k] for k in range(n)],
                                             "I": [inst.I[k] * xb[k] for k in range(n)],
                                             "W": [inst.W[k] * xb[k] for k in range(n)]})
    res = solve(serial, SolveOptions(objective=case.objective, time_limit=seconds, seed=0,
                                     memory_tiebreak=False))
    print(json.dumps({"probe": "serial", "case": case.id, "factor": f,
                      "paired_analytic": round(analytic_bound(inst, case.objective), 2),
                      "serial_value": round(res.objective_value, 2),
                      "serial_bound": round(res.lower_bound, 2)}), flush=True)
for _, case, f, inst in limited_rows([str(seconds), "1.5", "dualpipe/p4-m16-fb0.8"], "",
                                     lambda i: True):
    scale = TimeScale.choose(inst)
    for d in range(inst.devices):
        r = relaxation.relax_device(inst, case.objective, d, seconds, scale=scale,
                                    project=False)
        print(json.dumps({"probe": "devices", "case": case.id, "factor": f, "device": d,
                          "analytic": round(analytic_bound(inst, case.objective), 2),
                          "bound": r.bound / scale.time, "found": r.value is not None,
                          "proven": r.proven}), flush=True)
