"""The relaxation that keeps several devices' capacity and memory, on ZB-V's 6.2B times (issue 18).

``relaxation.relax_device`` keeps one device; this keeps the devices named and drops the
one-at-a-time and memory constraints of all others (``build_model(relaxed=...)``), so its optimum,
and any bound CP-SAT proves on it, is a lower bound on the instance. It asks which devices
carry the ZB-V rows' drain (docs/solver.md, "Where the ZB-V rows' gap sits"). No hint, no upper
bound; 2 workers, seed 0, span objective.

    python results/multichunk/relax_devices.py 4 8 60 0,1     # p, m, seconds, devices kept
"""

from __future__ import annotations

import sys
import time

from zbv_idle import six_b_times

from zbsolve.baselines import generate
from zbsolve.simulate import simulate
from zbsolve.solver import bounds
from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver
from zbsolve.solver.model import TimeScale, build_model


def main() -> None:
    if len(sys.argv) != 5:
        raise SystemExit("usage: relax_devices.py P M SECONDS DEVICES (e.g. 4 8 60 0,3)")
    p, m, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    keep = {int(d) for d in sys.argv[4].split(",")}
    inst = six_b_times(p, m)
    scale = TimeScale.choose(inst)
    print(f"p={p} m={m} kept {sorted(keep)}: zb-v span "
          f"{simulate(inst, generate('zb-v', inst)).max_span:.2f}, analytic bound "
          f"{bounds.analytic_bound(inst, 'span'):.2f}")
    t0 = time.perf_counter()
    sm = build_model(inst, "span", scale=scale,
                     relaxed=[d for d in range(p) if d not in keep])
    solver = new_solver(seconds, workers=2, seed=0, extra=EXACT_MODEL_PARAMS)
    code = solver.solve(sm.model)
    print(f"{solver.status_name(code)}: best {scale.to_time(solver.objective_value):.2f}, "
          f"bound {scale.to_time(solver.best_objective_bound):.2f}, "
          f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
