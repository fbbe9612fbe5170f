"""Proof times of one bench case under CP-SAT parameter sets, one seed after the other (issue
18's one-chunk "no regression" check: is a parameter worth changing, or is the spread luck?).

    python results/multichunk/twentyfourth/params_spread.py iclr-2p/14.6b-p16-m48 20 0:8 \
        '{"default": {}, "lin2": {"linearization_level": 2}}'

Each set is solved as the bench solves the case (its objective, 2 workers) with the seconds
given and seeds a .. b-1, the set's parameters added to every CP-SAT run
(``SolveOptions.cp_params``); per set one line of ``value@proof seconds`` (``none``: not
proven in the limit). CASE may also be a case file that ``results/bench/proof_spread.py
--write`` wrote (solved for the span); then the script reads only ``load_instance`` and
``solve``, so an older checkout runs it too (``PYTHONPATH=OLD``), and a solve without a
recorded proof time (before the memory phase) counts its solve time when it is optimal.
"""

from __future__ import annotations

import json
import sys

from zbsolve.instance import load_instance
from zbsolve.solver import SolveOptions, solve


def _case(case_id: str):
    """(instance, objective) of a bench case id or of a case file."""
    if case_id.endswith(".json"):
        try:
            return load_instance(case_id), "span"
        except (ValueError, OSError) as exc:  # InstanceError is a ValueError
            sys.exit(f"params_spread.py: {exc}")
    from zbsolve.bench import build_cases

    case = next((c for c in build_cases() if c.id == case_id), None)
    if case is None:
        sys.exit(f"params_spread.py: no bench case {case_id!r} (zbsolve bench --list)")
    return case.inst, case.objective


def main(args: list[str]) -> None:
    usage = "usage: params_spread.py CASE SECONDS A:B '{\"name\": {params}, ...}'"
    try:
        case_id, limit, sets = args[0], float(args[1]), json.loads(args[3])
        first, stop = (int(x) for x in args[2].split(":"))
    except (IndexError, ValueError):  # JSONDecodeError is a ValueError
        sys.exit(usage)
    if len(args) != 4 or not 0 < limit < float("inf") or not 0 <= first < stop or not (
            isinstance(sets, dict) and all(isinstance(v, dict) for v in sets.values())):
        sys.exit(usage + " (SECONDS positive, 0 <= A < B, each set a JSON object)")
    inst, objective = _case(case_id)
    for name, params in sets.items():
        runs = []
        for seed in range(first, stop):
            extra = {"cp_params": params} if params else {}  # older checkouts lack the field
            res = solve(inst, SolveOptions(time_limit=limit, objective=objective, seed=seed,
                                           **extra))
            proof = res.schedule.meta.get("solver", {}).get(
                "proof_time", res.solve_time if res.status == "optimal" else None)
            runs.append(f"{res.objective_value:.2f}@{'none' if proof is None else f'{proof:.1f}'}")
        print(f"{name:10s} {' '.join(runs)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
