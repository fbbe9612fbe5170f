"""``solve`` on one bench case with and without the memory-state bound, seed by seed (the
twenty-fifth pass's check that its first 0.1-1 s does not cost a V row its proof).

    python results/multichunk/twentyfifth/state_ab.py vhalf/p8-m32 120 0:2

One line per run: the case, seed, state bound on or off, status, value, bound, proof time.
"""

from __future__ import annotations

import sys

from zbsolve import bench
from zbsolve.solver import SolveOptions, solve


def main(args: list[str]) -> None:
    usage = "usage: state_ab.py CASE SECONDS A:B (seeds A .. B-1)"
    try:
        case_id, seconds = args[0], float(args[1])
        first, last = (int(x) for x in args[2].split(":"))
    except (ValueError, IndexError):
        sys.exit(usage)
    cases = bench.select(bench.build_cases(), [case_id])
    if len(cases) != 1 or seconds <= 0 or last <= first:
        sys.exit(f"{usage}: one case id (got {len(cases)} matching), seconds > 0, A < B")
    case = cases[0]
    for seed in range(first, last):
        for on in (True, False):
            res = solve(case.inst, SolveOptions(time_limit=seconds, workers=2, seed=seed,
                                                objective=case.objective, state_bound=on))
            proof = res.schedule.meta["solver"].get("proof_time")
            print(f"{case.id} seed {seed} state bound {'on ' if on else 'off'}: {res.status} "
                  f"{res.objective_value:g} / {res.lower_bound:g}"
                  + (f", proven at {proof:.1f} s" if proof is not None else ""), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
