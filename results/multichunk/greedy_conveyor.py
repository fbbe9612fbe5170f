"""The greedy's conveyor variants, A/B in one checkout (issue 18, thirty-third pass;
docs/scale.md, "Conveyor admission").

    python results/multichunk/greedy_conveyor.py random random-tight vmin vhalf

On every bench case with several stages per device, at most 20,000 ops and an id starting with
one of the prefixes: the best of ``default_variants`` without the conveyor variants and with
them (the case's own objective), and the seconds each set took. Single-threaded,
deterministic (no solver).
"""

from __future__ import annotations

import sys
import time

from zbsolve.bench import build_cases
from zbsolve.graph import TaskGraph
from zbsolve.solver.heuristic import default_variants, heuristic_schedule


def main(prefixes: list[str]) -> None:
    print("case objective without with seconds_without seconds_with")
    for case in build_cases():
        inst = case.inst
        if inst.chunks < 2 or not any(case.id.startswith(p + "/") for p in prefixes):
            continue
        if TaskGraph(inst).count() > 20000:
            continue
        every = default_variants(inst)
        row = []
        for variants in ([v for v in every if not v.conveyor], every):
            t0 = time.monotonic()
            _, result = heuristic_schedule(inst, case.objective, variants)
            row += [result.value(case.objective), time.monotonic() - t0]
        print(f"{case.id} {case.objective} {row[0]:g} {row[2]:g} {row[1]:.2f} {row[3]:.2f}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
