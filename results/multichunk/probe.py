"""Probes behind the fourth pass's notes on random-04 and the iclr-2p rows (README, "Fourth pass").

    # a bench case solved with extra CP-SAT parameters (SolveOptions.cp_params), 2 workers
    python results/multichunk/probe.py random/random-04 60 '{"subsolvers": ["max_lp"]}'
    python results/multichunk/probe.py iclr-2p/6.2b-p8-m24 20 '{"random_seed": 1}'
    # the whole model as a feasibility question: is there a schedule of value <= T (model units)?
    python results/multichunk/probe.py random/random-04 60 --feasible-at 2630,2635

The case runs under its own objective; the solve figures are the solver's (simulated).
"""

from __future__ import annotations

import argparse
import json
import time

from zbsolve.bench import build_cases, select


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", help="a bench case id, e.g. random/random-04")
    ap.add_argument("seconds", type=float)
    ap.add_argument("params", nargs="?", default="{}", help="CP-SAT parameters as JSON")
    ap.add_argument("--feasible-at", help="comma-separated values T in model units")
    args = ap.parse_args()
    case = select(build_cases(time_limit=args.seconds), [args.case])[0]
    params = json.loads(args.params)
    if args.feasible_at:
        from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver
        from zbsolve.solver.model import TimeScale, build_model

        scale = TimeScale.choose(case.inst)
        for value in (int(x) for x in args.feasible_at.split(",")):
            sm = build_model(case.inst, case.objective, upper_bound=value, horizon=value,
                             scale=scale)
            solver = new_solver(args.seconds, workers=2, seed=0,
                                extra={**EXACT_MODEL_PARAMS, **params})
            code = solver.solve(sm.model)
            print(f"{args.case} value <= {value / scale.time}: {solver.status_name(code)} "
                  f"after {solver.wall_time:.1f} s")
        return
    from zbsolve.solver import SolveOptions, solve

    t0 = time.monotonic()
    res = solve(case.inst, SolveOptions(time_limit=args.seconds, objective=case.objective,
                                        progress=False, cp_params=params))
    proof = res.schedule.meta["solver"].get("proof_time")
    print(f"{args.case} {json.dumps(params)}: {res.status} {res.objective_value:.2f} / "
          f"{res.lower_bound:.2f} (gap {100 * res.gap:.2f} %), {time.monotonic() - t0:.1f} s, "
          f"proof {'-' if proof is None else f'{proof:.1f} s'}")


if __name__ == "__main__":
    main()
