"""The window search before CP-SAT, measured by hand (issue 18, fifth pass; docs/solver.md,
"Windows first").

    python results/multichunk/windows_probe.py 0 60 random/random-01   # windows alone, 60 s
    python results/multichunk/windows_probe.py 10 60 random/random-29  # 10 s windows, then CP-SAT

With S > 0: ``solve(method="large")`` for S seconds, then the exact method (without its own
window phase) from that schedule for the rest of T; with S = 0, the large method for all of T.
"""

from __future__ import annotations

import sys
import time

from zbsolve.bench import build_cases, select
from zbsolve.solver import SolveOptions, solve


def main() -> None:
    share, total = float(sys.argv[1]), float(sys.argv[2])
    for case in select(build_cases(time_limit=total), sys.argv[3:]):
        opts = dict(objective=case.objective, progress=False)
        t0 = time.perf_counter()
        first = solve(case.inst, SolveOptions(time_limit=share or total, method="large", **opts))
        line = f"{case.id}: windows {first.objective_value:.2f} / {first.lower_bound:.2f}"
        if share:
            spent = time.perf_counter() - t0
            left = total - spent
            res = solve(case.inst, SolveOptions(time_limit=left, windows=False, **opts),
                        hints=[first.schedule])
            proof = res.schedule.meta["solver"].get("proof_time")
            line += (f" -> {res.status} {res.objective_value:.2f} / {res.lower_bound:.2f}"
                     f" (gap {100 * res.gap:.2f} %), proof "
                     f"{'-' if proof is None else f'{proof + spent:.1f} s'}")
        print(f"{line}, {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
