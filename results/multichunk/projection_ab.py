"""One-device relaxations of bench cases with the free devices projected out and without
(issue 18, twenty-eighth pass; ``zbsolve/solver/projected.py``).

Each relaxation is ``relaxation.relax_device`` with 2 workers, seed 0, no hint, no floor, for
at most SECONDS, once with ``project=True`` (the default) and once with ``project=False`` (the
full model with the other devices relaxed). Devices: those given after the case (``CASE:D``
or ``CASE:D+E`` for a pair), else every candidate (``relaxation.candidates``). Prints per
relaxation bound / best value, P where proven, and wall seconds for each arm, then the
relaxations proven by each and their summed seconds. ``--projected`` first: that arm alone
(for relaxations the full model is too slow to be worth running, such as triples).

    python results/multichunk/projection_ab.py 10 'random/*'
    python results/multichunk/projection_ab.py 30 vmin/p16-m32:15 random/random-25:0+3
    python results/multichunk/projection_ab.py --projected 30 random/random-01:0+3+2
"""

from __future__ import annotations

import fnmatch
import math
import sys

from zbsolve.bench import build_cases
from zbsolve.solver import relaxation
from zbsolve.solver.model import TimeScale

USAGE = "usage: projection_ab.py [--projected] SECONDS CASE[:D[+E...]]..."


def main() -> None:
    args = sys.argv[1:]
    arms: tuple[bool, ...] = (True, False)
    if args[:1] == ["--projected"]:
        arms, args = (True,), args[1:]
    try:
        seconds = float(args[0])
    except (IndexError, ValueError):
        sys.exit(USAGE)
    if not (seconds > 0 and math.isfinite(seconds)) or len(args) < 2:
        sys.exit(USAGE)
    cases = build_cases()
    totals = {True: [0, 0.0], False: [0, 0.0]}
    for spec in args[1:]:
        pattern, _, devs = spec.partition(":")
        chosen = [c for c in cases if fnmatch.fnmatch(c.id, pattern)]
        if not chosen:
            sys.exit(f"{USAGE}: no bench case matches {pattern!r}")
        for c in chosen:
            scale = TimeScale.choose(c.inst)
            given = devs.split("+") if devs else []
            if not all(x.isdigit() and int(x) < c.inst.devices for x in given):
                sys.exit(f"{USAGE}: {spec!r}: devices are 0 .. {c.inst.devices - 1}, "
                         "joined by +")
            runs = ([[int(x) for x in given]] if given
                    else [[d] for d in relaxation.candidates(c.inst)])
            for kept in runs:
                cells = []
                for project in arms:
                    r = relaxation.relax_device(c.inst, c.objective, kept[0], seconds,
                                                scale=scale, also=tuple(kept[1:]),
                                                project=project)
                    value = "-" if r.value is None else f"{r.value / scale.time:g}"
                    cells.append(f"{r.bound / scale.time:g} / {value} "
                                 f"{'P' if r.proven else ' '} {r.seconds:6.2f} s")
                    totals[project][0] += r.proven
                    totals[project][1] += r.seconds
                print(f"{c.id:28s} {'+'.join(map(str, kept)):6s} "
                      + "  ".join(f"{'projected' if a else 'full'} {cell:28s}"
                                  for a, cell in zip(arms, cells)).rstrip(), flush=True)
    for project, (proven, secs) in totals.items():
        if project not in arms:
            continue
        print(f"{'projected' if project else 'full':9s}: {proven} proven, {secs:.1f} s in all")


if __name__ == "__main__":
    main()
