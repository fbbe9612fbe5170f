"""How a one-chunk bench case's proof time spreads over repeated solves (issue 18's "no
regression" check): one run is one draw of CP-SAT's wall-time search (iclr-2p/6.2b-p8-m24
with the code of 2026-11-29: proven in 4.0-13.7 s over 8 runs; ``proof-spread-2026-12-05/``).

    python results/bench/proof_spread.py --write iclr-2p/6.2b-p8-m24 case.json
    python results/bench/proof_spread.py case.json 8
    python results/bench/proof_spread.py case.json 8 '{"transitive_precedences_work_limit": 1000000}'
    python results/bench/proof_spread.py --limit 45 case.json 2

The second form solves the file N times, one after the other, as the bench solves the case
(20 s, span, 2 workers, seed 0), and prints each run's status, value, bound, proof time and
solve time; the third adds CP-SAT parameters (``SolveOptions.cp_params``); ``--limit``
gives each solve that many seconds instead of 20 (a proof past 20 s is then timed, not lost). Without them it
reads only ``load_instance`` and ``solve``, so an older checkout runs it too
(``PYTHONPATH=OLD_CHECKOUT python results/bench/proof_spread.py case.json 8``).
"""

from __future__ import annotations

import json
import sys

from zbsolve.instance import load_instance
from zbsolve.solver import SolveOptions, solve


def main(args: list[str]) -> None:
    limit = 20.0
    if args[:1] == ["--limit"]:
        try:
            limit = float(args[1])
        except (IndexError, ValueError):
            sys.exit("proof_spread.py: --limit takes a number of seconds")
        if not 0 < limit < float("inf"):
            sys.exit("proof_spread.py: --limit takes a positive, finite number of seconds")
        args = args[2:]
    if len(args) == 3 and args[0] == "--write":
        from zbsolve.bench import build_cases

        cases = [c for c in build_cases() if c.id == args[1]]
        if not cases:
            sys.exit(f"proof_spread.py: no bench case {args[1]!r}")
        try:
            with open(args[2], "w", encoding="utf-8") as f:
                json.dump(cases[0].inst.to_dict(), f)
        except OSError as exc:
            sys.exit(f"proof_spread.py: cannot write {args[2]}: {exc.strerror}")
        return
    try:
        path, runs = args[0], int(args[1])
        extra = {"cp_params": json.loads(args[2])} if len(args) > 2 else {}
    except (IndexError, ValueError):
        sys.exit("usage: proof_spread.py [--limit SECONDS] FILE RUNS [CP_PARAMS_JSON] | "
                 "--write CASE FILE")
    try:
        inst = load_instance(path)
    except (ValueError, OSError) as exc:  # InstanceError is a ValueError
        sys.exit(f"proof_spread.py: {exc}")
    for k in range(runs):
        res = solve(inst, SolveOptions(time_limit=limit, objective="span", **extra))
        proof = (res.schedule.meta.get("solver") or {}).get("proof_time")
        print(f"{k} {res.status} {res.objective_value:.2f} / {res.lower_bound:.2f}, proof "
              f"{'none' if proof is None else f'{proof:.2f} s'}, solve {res.solve_time:.2f} s",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
