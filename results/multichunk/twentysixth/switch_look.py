"""``solve`` on bench cases with the bound switch's look (``api.SWITCH_LOOK``) as given, seed by
seed (the twenty-sixth pass: a first exact run that starts just before the switch's quarter).

    python results/multichunk/twentysixth/switch_look.py 60 0:1 0.0833 'random/*'

LOOK 0 is the rule before this pass (a run is tested at the quarter however late it began).
One line per run: the case, seed, look, status, value / bound, proof time, and the whole-model
runs as phase@start+wall (stopped marked).
"""

from __future__ import annotations

import sys

from zbsolve import bench
from zbsolve.solver import SolveOptions, api, solve


def main(args: list[str]) -> None:
    usage = "usage: switch_look.py SECONDS A:B LOOK PATTERN..."
    try:
        seconds = float(args[0])
        first, last = (int(x) for x in args[1].split(":"))
        look = float(args[2])
        patterns = args[3:]
    except (ValueError, IndexError):
        sys.exit(usage)
    cases = bench.select(bench.build_cases(), patterns)
    if not cases or seconds <= 0 or last <= first or not 0 <= look < api.SWITCH_AT:
        sys.exit(f"{usage}: some case, seconds > 0, A < B, 0 <= LOOK < {api.SWITCH_AT}")
    api.SWITCH_LOOK = look
    for case in cases:
        for seed in range(first, last):
            res = solve(case.inst, SolveOptions(time_limit=seconds, workers=2, seed=seed,
                                                objective=case.objective))
            info = res.schedule.meta["solver"]
            proof = info.get("proof_time")
            runs = " ".join(f"{r['phase']}@{r['start']:.1f}+{r['wall']:.1f}"
                            + ("(stopped)" if r["stopped"] else "")
                            for r in info.get("cp_runs", []))
            print(f"{case.id} seed {seed} look {look:g}: {res.status} {res.objective_value:g} / "
                  f"{res.lower_bound:g}" + (f", proven at {proof:.1f} s" if proof else "")
                  + f"; {runs}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
