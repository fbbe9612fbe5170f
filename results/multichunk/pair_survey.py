"""Pair relaxations: the top device kept exact together with one other (issue 18, seventeenth
pass; ``relaxation.relax_device(also=...)``, docs/solver.md "One-device relaxations").

For each instance named (of ``zbsolve.bench.random_family``, seed 0; ``random-tight-*`` from the
near-serial family), makespan, 2 workers, seed 0, no bound passed from one run to the next:
every candidate device's relaxation for SINGLE seconds; the top one (the longest relaxed
schedule, then the highest bound); then that device kept exact with each other device in turn
for PAIR seconds. The partners are listed in the order of the overload the top relaxation's
schedule puts on them (``Relaxation.overload``), the most first.

    python results/multichunk/pair_survey.py 1 6 random-04 random-07 random-tight-27

One line per instance (analytic bound, ``device:bound``, ``*`` where proven, the top device),
then one per pair: its bound, ``*`` where proven, its best schedule, seconds, the overload.
"""

from __future__ import annotations

import sys

from zbsolve.bench import random_family
from zbsolve.solver import relaxation
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.model import TimeScale

USAGE = "usage: pair_survey.py SINGLE_SECONDS PAIR_SECONDS NAME [NAME ...]"


def main(argv: list[str]) -> int:
    try:
        single, pair, names = float(argv[0]), float(argv[1]), argv[2:]
        assert single > 0 and pair > 0 and names
    except (ValueError, IndexError, AssertionError):
        print(USAGE, file=sys.stderr)
        return 1
    family = {i.name: i for tight in (False, True) for i in random_family(tight=tight)}
    unknown = [name for name in names if name not in family]
    if unknown:
        print(f"pair_survey.py: no instance {', '.join(unknown)} in the random families "
              "(random-00 .. random-29, random-tight-00 .. random-tight-29)", file=sys.stderr)
        return 1
    for name in names:
        inst = family[name]
        scale = TimeScale.choose(inst)

        def units(x: float | None, per: int = scale.time) -> str:
            return "-" if x is None else f"{x / per:.1f}"

        runs = [relaxation.relax_device(inst, "makespan", d, single, scale=scale)
                for d in relaxation.candidates(inst)]
        solved = [r for r in runs if r.value is not None]
        if not solved:
            print(name, "no relaxation found a schedule in", single, "s: no top device")
            continue
        top = max(solved, key=lambda r: (r.value, r.bound))
        print(name, f"analytic={analytic_bound(inst, 'makespan'):.1f}",
              " ".join(f"{r.device}:{units(r.bound)}{'*' if r.proven else ''}" for r in runs),
              f"top={top.device} ({units(top.value)})", flush=True)
        over = dict(top.overload)
        for e, _ in top.overload:
            r = relaxation.relax_device(inst, "makespan", top.device, pair, scale=scale,
                                        also=(e,))
            print(f"  ({top.device},{e}) {units(r.bound)}{'*' if r.proven else ''} "
                  f"best {units(r.value)} {r.seconds:.1f}s overload {units(over[e])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
