"""How far the published ZB-V is from the optimum, and the analytic bound from it, on small
settings the solver proves (issue 18: "proving that the published ZB-V is, or is not, near
optimal"). The 6.2B ZB-V row's times at p devices, m microbatches, limit 2p; per setting:
ZB-V's span, the analytic bound, and ``solve`` (span, 2 workers, seed 0, SECONDS):

    python results/multichunk/zbv_small_optima.py SECONDS P:M [P:M ...]
"""

from __future__ import annotations

import sys

from zbv_idle import six_b_times

from zbsolve.baselines import generate
from zbsolve.simulate import validate
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound


def main(args: list[str]) -> None:
    try:
        seconds = float(args[0])
        settings = [tuple(int(x) for x in a.split(":")) for a in args[1:]]
        if seconds <= 0 or not settings or any(len(s) != 2 or min(s) < 1 for s in settings):
            raise ValueError
    except (IndexError, ValueError):
        sys.exit("usage: zbv_small_optima.py SECONDS P:M [P:M ...] (e.g. 60 3:4 3:6)")
    for p, m in settings:
        inst = six_b_times(p, m)
        zbv = validate(inst, generate("zb-v", inst)).value("span")
        bound = analytic_bound(inst, "span")
        res = solve(inst, SolveOptions(time_limit=seconds, objective="span"))
        proof = res.schedule.meta["solver"].get("proof_time")
        print(f"p={p} m={m}: zb-v {zbv:.2f}, analytic bound {bound:.2f}; solve {res.status} "
              f"{res.objective_value:.2f} / {res.lower_bound:.2f}"
              f"{'' if proof is None else f' (proof {proof:.1f} s)'}: zb-v "
              f"{100 * (zbv / res.lower_bound - 1):.2f} % above the solve's bound, "
              f"the analytic bound {100 * (1 - bound / res.lower_bound):.2f} % below it",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
