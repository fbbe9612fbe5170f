"""One device's relaxation of an instance file, solved alone (issue 18, fourteenth pass).

The relaxation is the solver's own (``relaxation.relax_device``: every other device's
one-at-a-time and memory constraints left out, docs/solver.md "One-device relaxations"), with
2 workers, seed 0, no hint and no upper bound, and any CP-SAT parameters given as JSON on top
of the exact model's. Prints the relaxation's status, its bound (a lower bound on the
instance's optimum), its best value (the relaxation's optimum is at most that) and the wall
time, next to the analytic bound.

    python results/multichunk/relax_probe.py results/multichunk/fourteenth/loop-038/m8.yaml 40 0
    python results/multichunk/relax_probe.py results/multichunk/fourteenth/loop-038/m8.yaml 40 0 \\
        '{"subsolvers": ["lb_tree_search"]}'
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cp_params  # noqa: E402

from zbsolve.instance import InstanceError, load_instance  # noqa: E402
from zbsolve.solver import relaxation  # noqa: E402
from zbsolve.solver.bounds import analytic_bound  # noqa: E402
from zbsolve.solver.model import TimeScale  # noqa: E402

USAGE = "usage: relax_probe.py INSTANCE SECONDS DEVICE [PARAMS-JSON] [makespan|span]"


def main() -> None:
    try:
        path, seconds, device = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    except (IndexError, ValueError):
        sys.exit(USAGE)
    if not (seconds > 0 and math.isfinite(seconds)):
        sys.exit(f"{USAGE}: SECONDS must be a finite number above 0, got {sys.argv[2]!r}")
    params = cp_params.parse(sys.argv[4] if len(sys.argv) > 4 else None, USAGE)
    objective = sys.argv[5] if len(sys.argv) > 5 else "makespan"
    if objective not in ("makespan", "span"):
        sys.exit(f"{USAGE}: expected makespan or span, got {objective!r}")
    try:
        inst = load_instance(path)
    except (OSError, InstanceError) as err:
        sys.exit(f"{USAGE}: {err}")
    if not 0 <= device < inst.devices:
        sys.exit(f"{USAGE}: DEVICE must be 0..{inst.devices - 1}, got {device}")
    scale = TimeScale.choose(inst)
    try:
        r = relaxation.relax_device(inst, objective, device, seconds, scale=scale, workers=2,
                                    seed=0, params=params)
    except (AttributeError, TypeError, ValueError) as err:  # not a CP-SAT parameter, or its type
        sys.exit(f"{USAGE}: PARAMS-JSON: {err}")
    value = "none" if r.value is None else f"{r.value / scale.time:.3f}"
    print(f"{inst.name} device {device} ({objective}{', ' + json.dumps(params) if params else ''})"
          f": {'proven' if r.proven else 'open'}, bound {r.bound / scale.time:.3f}, best {value}"
          f", analytic {analytic_bound(inst, objective):.3f}, {r.seconds:.1f} s")


if __name__ == "__main__":
    main()
