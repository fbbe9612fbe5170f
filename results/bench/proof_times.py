"""Proof times of the one-chunk bench cases, against the first bench run (issue 18's "no
regression" check: every one-chunk case of ``zbsolve bench`` proves as fast as before, ±20 %).

``zbsolve bench`` reports each case's whole solve, which since the memory phase (the exact
method's tie-break after a proof) is longer than its proof; the solve's own
``solver.proof_time`` is the time to compare. The first bench run (``results/bench/bench.csv``,
2026-11-29) had no memory phase, so its solve time was its proof time. Each case of the families
named whose devices hold one stage of one replica is solved as the bench solves it (its limit,
objective, 2 workers, seed 0), one after the other:

    python results/bench/proof_times.py iclr-1p iclr-2p small large segments
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from zbsolve.bench import build_cases
from zbsolve.solver import SolveOptions, solve


def main(families: list[str]) -> None:
    if not families:
        sys.exit("usage: proof_times.py FAMILY... (e.g. iclr-1p iclr-2p small large segments)")
    cases = [case for case in build_cases() if case.family in families
             and case.inst.chunks == 1 and case.inst.replicas == 1]
    unknown = sorted(set(families) - {case.family for case in cases})
    if unknown:
        sys.exit(f"proof_times.py: no one-chunk bench cases in the families {unknown}")
    with open(Path(__file__).parent / "bench.csv", encoding="utf-8") as f:
        before = {row["case"]: row for row in csv.DictReader(f)}
    for case in cases:
        result = solve(case.inst, SolveOptions(time_limit=case.time_limit,
                                               objective=case.objective))
        proof = result.schedule.meta["solver"].get("proof_time")
        was = before.get(case.id)
        then = "not in the first run" if was is None else (
            f"{was['status']} {float(was['value']):.2f} in {float(was['solve_time']):.3f} s")
        print(f"{case.id} ({case.time_limit:g} s): {result.status} "
              f"{result.objective_value:.2f}, proof "
              f"{'none' if proof is None else f'{proof:.3f} s'}, solve "
              f"{result.solve_time:.3f} s; 2026-11-29: {then}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
