"""What the last run of the relaxations first adds (issue 18, twenty-seventh pass): for every
instance of a random family (``zbsolve.bench.random_family``, seed 0), the relaxations first as
a 60-s solve runs them (``relaxation.quick_bound``: a share of 6 s, 1-s slices, the shaving
pass, then the rest of the share for the open relaxation with the longest relaxed schedule;
since the twenty-eighth pass no shaving slice where that relaxation is the only one open),
makespan, 2 workers, seed 0, with no incumbent to stop them:

    python results/multichunk/rest_survey.py random
    python results/multichunk/rest_survey.py random-tight

One line per instance that has a last run: the bound before it, the device, its relaxed
schedule before it, the bound and schedule after it (``*``: proven), its seconds.
"""

from __future__ import annotations

import sys

from zbsolve.bench import random_family
from zbsolve.solver import relaxation
from zbsolve.solver.model import TimeScale


def _value(r: relaxation.Relaxation, unit: int) -> str:
    return "-" if r.value is None else f"{r.value / unit:.1f}"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("random", "random-tight"):
        print("usage: rest_survey.py random|random-tight", file=sys.stderr)
        return 1
    runs_with = 0
    for inst in random_family(tight=argv[0] == "random-tight"):
        scale = TimeScale.choose(inst)
        raw, runs = relaxation.quick_bound(inst, "makespan", 6.0, 1.0, scale=scale, shave=True,
                                           rest=True)
        if not runs or not runs[-1].rest:
            continue
        runs_with += 1
        last, before = runs[-1], runs[:-1]
        unit = scale.time
        mine = [r for r in before if r.device == last.device]
        print(inst.name, f"bound {max(r.bound for r in before) / unit:.1f} ->",
              f"{raw / unit:.1f}", f"device {last.device}:",
              f"{max(r.bound for r in mine) / unit:.1f} / {_value(mine[-1], unit)} ->",
              f"{last.bound / unit:.1f}{'*' if last.proven else ''} / {_value(last, unit)}",
              f"({last.seconds:.1f}s)", flush=True)
    print(f"{runs_with} instances with a last run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
