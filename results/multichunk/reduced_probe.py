"""Solve a bench case with fewer microbatches, then stretch that schedule to other cases (issue 18,
tenth pass): is a reduced instance's schedule a good seed where ``stretch.reduced_sizes`` does not
pick one?

    python results/multichunk/reduced_probe.py vmin/p16-m32 16 90 vmin/p16-m32 vmin/p16-m64

Solves CASE with M' microbatches for SECONDS (``solve``, 2 workers, seed 0, the case's
objective), then simulates every stretch of its schedule (``stretch.stretched``, at most 30 s per
target) on each TARGET with the memory limit and prints the best.
"""

from __future__ import annotations

import sys
import time

from zbsolve.bench import build_cases, machine_note
from zbsolve.simulate import ScheduleError, validate
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.stretch import reduced, stretched

USAGE = "usage: reduced_probe.py CASE M' SECONDS TARGET [TARGET ...]"


def main() -> None:
    try:
        case_id, m_small, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    except (IndexError, ValueError):
        sys.exit(USAGE)
    if m_small < 1 or seconds <= 0:
        sys.exit(f"{USAGE}: M' must be >= 1 and SECONDS > 0")
    cases = {c.id: c for c in build_cases()}
    unknown = [k for k in [case_id, *sys.argv[4:]] if k not in cases]
    if unknown or len(sys.argv) < 5:
        sys.exit(f"{USAGE}: unknown case {' '.join(unknown)}" if unknown else USAGE)
    case = cases[case_id]
    print(f"# python results/multichunk/reduced_probe.py {' '.join(sys.argv[1:])}\n"
          f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine_note()}", flush=True)
    t0 = time.perf_counter()
    small = solve(reduced(case.inst, m_small),
                  SolveOptions(time_limit=seconds, workers=2, seed=0, objective=case.objective))
    print(f"{case_id} with m' = {m_small}: {small.status} {small.objective_value:g} / "
          f"{small.lower_bound:g} ({time.perf_counter() - t0:.1f} s)", flush=True)
    for target in sys.argv[4:]:
        inst, best, tried = cases[target].inst, None, 0
        until = time.perf_counter() + 30
        for cand in stretched(inst, small.schedule,
                              stop=lambda until=until: time.perf_counter() > until):
            tried += 1
            try:
                value = validate(inst, cand).value(case.objective)
            except ScheduleError:
                continue
            if best is None or value < best[0]:
                best = (value, cand.name)
        found = "no valid stretch" if best is None else f"best {best[0]:g} ({best[1]})"
        print(f"  {target}: {tried} stretches, {found}", flush=True)


if __name__ == "__main__":
    main()
