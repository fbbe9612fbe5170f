"""Prove (or not) the optimum of a small ZB-V setting with the bare exact model (issue 18).

The 6.2B ZB-V row's per-chunk times and memory (limit 2p, ``zbv_idle.six_b_times``) at a small
p and m. The model is ``build_model`` as the solver builds it (microbatch order, the analytic
bound as the objective's floor), optionally hinted with the published ZB-V and optionally
bounded above by its span, then CP-SAT alone (2 workers, the seed given, the exact model's
parameters and any given as JSON). Prints the status, CP-SAT's bound and its best span in ms,
and the wall time.

    python results/multichunk/zbv_proof.py 2 4 60 0 hint          # hint, no upper bound
    python results/multichunk/zbv_proof.py 2 4 60 0 hint,upper    # as the solver's exact run
    python results/multichunk/zbv_proof.py 4 8 60 0 hint '{"subsolvers": ["lb_tree_search"]}'
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cp_params  # noqa: E402
from zbv_idle import six_b_times  # noqa: E402

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.schedule import split_backward  # noqa: E402
from zbsolve.simulate import simulate  # noqa: E402
from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver  # noqa: E402
from zbsolve.solver.model import TimeScale, build_model, scaled_instance  # noqa: E402

USAGE = "usage: zbv_proof.py P M SECONDS SEED [hint,upper | hint | upper | bare] [PARAMS-JSON]"


def main() -> None:
    try:
        p, m, seconds, seed = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                               int(sys.argv[4]))
    except (IndexError, ValueError):
        sys.exit(USAGE)
    what = sys.argv[5].split(",") if len(sys.argv) > 5 else []
    if not set(what) <= {"hint", "upper", "bare"}:
        sys.exit(f"{USAGE}: unknown option in {sys.argv[5]!r}")
    params = cp_params.parse(sys.argv[6] if len(sys.argv) > 6 else None, USAGE)
    inst = six_b_times(p, m)
    scale = TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    zbv = split_backward(generate("zb-v", inst))
    sim = simulate(si, zbv)  # model units
    upper = int(round(sim.value("span"))) if "upper" in what else None
    sm = build_model(inst, "span", scale=scale, upper_bound=upper)
    if "hint" in what:
        sm.add_hint({op: int(round(t)) for op, t in sim.start.items()})
    try:
        solver = new_solver(seconds, workers=2, seed=seed,
                            extra={**EXACT_MODEL_PARAMS, **params})
    except (AttributeError, TypeError, ValueError) as err:  # not a CP-SAT parameter, or its type
        sys.exit(f"{USAGE}: PARAMS-JSON: {err}")
    t0 = time.perf_counter()
    code = solver.solve(sm.model)
    print(f"ZB-V times p={p} m={m} ({'+'.join(what) or 'bare'}, seed {seed}"
          f"{', ' + json.dumps(params) if params else ''}): "
          f"{solver.status_name(code)}, bound {solver.best_objective_bound / scale.time:.2f}, "
          f"best {solver.objective_value / scale.time:.2f}, published ZB-V "
          f"{simulate(inst, generate('zb-v', inst)).value('span'):.2f}, "
          f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
