"""``solve`` on bench cases with one of its switches on and off, seed by seed (the twenty-sixth
pass's check of the relaxations' shaving slice; any boolean ``SolveOptions`` field works).

    python results/multichunk/option_ab.py shave 60 0:1 random/random-29 random/random-27

One line per run: the case, seed, option on or off, status, value / bound, proof time, the
relaxations first (device:bound, ``*`` proven, ``s`` shaved, ``r`` the rest of the share) and
the whole-model runs (phase@start+wall).
"""

from __future__ import annotations

import sys
from dataclasses import fields

from zbsolve import bench
from zbsolve.solver import SolveOptions, solve

SWITCHES = sorted(f.name for f in fields(SolveOptions) if f.type in (bool, "bool"))


def main(args: list[str]) -> None:
    usage = f"usage: option_ab.py OPTION SECONDS A:B PATTERN... (OPTION: {', '.join(SWITCHES)})"
    try:
        option, seconds = args[0], float(args[1])
        first, last = (int(x) for x in args[2].split(":"))
        patterns = args[3:]
    except (ValueError, IndexError):
        sys.exit(usage)
    cases = bench.select(bench.build_cases(), patterns)
    if option not in SWITCHES or not cases or seconds <= 0 or last <= first:
        sys.exit(f"{usage}: a switch, some case, seconds > 0, A < B")
    for case in cases:
        for seed in range(first, last):
            for on in (True, False):
                res = solve(case.inst, SolveOptions(time_limit=seconds, workers=2, seed=seed,
                                                    objective=case.objective, **{option: on}))
                info = res.schedule.meta["solver"]
                proof = info.get("proof_time")
                relax = " ".join(f"{r['device']}:{r['bound']:g}" + ("*" if r["proven"] else "")
                                 + ("s" if r.get("shaved") else "")
                                 + ("r" if r.get("rest") else "")
                                 for r in info.get("relax_first", []))
                runs = " ".join(f"{r['phase']}@{r['start']:.1f}+{r['wall']:.1f}"
                                for r in info.get("cp_runs", []))
                print(f"{case.id} seed {seed} {option} {'on ' if on else 'off'}: {res.status} "
                      f"{res.objective_value:g} / {res.lower_bound:g}"
                      + (f", proven at {proof:.1f} s" if proof is not None else "")
                      + f"; relax [{relax}]; {runs}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
