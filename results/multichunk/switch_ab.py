"""The bound switch (issue 18, twelfth pass): each case with it, and without it where it fired.

For each case: ``solve`` with the defaults (the switch on), 2 workers, seed 0, the case's
objective, SECONDS; if the exact run gave way to the bound search (a ``bound-search`` entry in
``cp_runs``), the same solve again with ``bound_switch=False``. One run after the other. A case
is a bench case id (``zbsolve bench --list``) or ``zbv-P-M``: ZB-V's 6.2B times at p = P,
m = M, limit 2p, span (``zbv_idle.six_b_times``).

    python results/multichunk/switch_ab.py 60 random/random-18 zbv-4-8 vhalf/p4-m16

Prints a Markdown table, a row per case as it ends.
"""

from __future__ import annotations

import os
import sys
import time

from zbv_idle import six_b_times

from zbsolve.bench import build_cases, machine_note, select
from zbsolve.solver import SolveOptions, solve


def case_of(name: str, seconds: float):
    """(instance, objective) of a case name."""
    if name.startswith("zbv-"):
        try:
            _, p, m = name.split("-")
            return six_b_times(int(p), int(m)), "span"
        except ValueError as err:
            raise SystemExit(f"{name}: expected zbv-P-M with integers P, M ({err})") from None
    found = [c for c in select(build_cases(time_limit=seconds), [name]) if c.id == name]
    if len(found) != 1:
        raise SystemExit(f"{name}: expected one bench case or zbv-P-M, found {len(found)}")
    return found[0].inst, found[0].objective


def cell(inst, objective: str, seconds: float, switch: bool) -> tuple[str, bool]:
    """One solve: its table cell, and whether the switch fired."""
    res = solve(inst, SolveOptions(time_limit=seconds, workers=2, seed=0, objective=objective,
                                   bound_switch=switch))
    solver = res.schedule.meta["solver"]
    runs = solver.get("cp_runs", [])
    fired = any(r["phase"] == "bound-search" for r in runs)
    proof = (f" optimal at {solver['proof_time']:.1f} s" if res.status == "optimal"
             and "proof_time" in solver else f" {res.status}")
    runs_txt = ", ".join(f"{r['phase']} {r['status'].lower()} {r['wall']:.1f} s" for r in runs)
    return (f"{res.objective_value:.6g} / {res.lower_bound:.6g}{proof} "
            f"(gap {100 * res.gap:.2f} %; {runs_txt or 'no CP-SAT run'})"), fired


def main() -> None:
    usage = "usage: switch_ab.py SECONDS CASE [CASE ...]"
    try:
        seconds = float(sys.argv[1])
    except (IndexError, ValueError):
        raise SystemExit(f"{usage}: SECONDS, a number, first") from None
    if len(sys.argv) < 3 or not seconds > 0:
        raise SystemExit(f"{usage}: SECONDS > 0 and at least one case")
    print(f"Started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine_note()}; "
          f"command: `python results/multichunk/switch_ab.py {' '.join(sys.argv[1:])}`\n")
    print("| case | with the switch (default) | without (only where it fired) |")
    print("|---|---|---|", flush=True)
    for name in sys.argv[2:]:
        inst, objective = case_of(name, seconds)
        with_, fired = cell(inst, objective, seconds, True)
        without = cell(inst, objective, seconds, False)[0] if fired else "(did not fire)"
        print(f"| {name} | {with_} | {without} |", flush=True)
    print(f"\nEnded {time.strftime('%H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
