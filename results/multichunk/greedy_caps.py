"""The greedy's in-flight cap under the banker's test (issue 18, eighteenth pass;
docs/scale.md, "Banker's-test admission").

    python results/multichunk/greedy_caps.py grid vhalf/p16-m32 vhalf/p16-m64 vmin/p16-m32
    python results/multichunk/greedy_caps.py ab random vhalf vmin

``grid``: per bench case, the best span (makespan for makespan cases) over fit / fill and three
I/F picks, for each in-flight cap (multiples of the warm-up depth; ``mem``: memory alone), with
the reservation and with the banker's test (``S``). ``ab``: on every bench case with several
stages per device, at most 20,000 ops and an id starting with one of the prefixes, the best of
``default_variants`` without and with the cap-1.0 banker's-test variants, and the seconds each
set took. Single-threaded, deterministic (no solver).
"""

from __future__ import annotations

import sys
import time

from zbsolve.bench import build_cases
from zbsolve.graph import TaskGraph
from zbsolve.simulate import validate
from zbsolve.solver.heuristic import GreedyParams, _Deadlock, default_variants, greedy

CAPS = (None, 0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.5, 2.0)
PICKS = (("mb", "mb"), ("deep", "mb"), ("deep", "deep"))
# the variants the eighteenth pass added to ``default_variants``
CAP_ONE = [GreedyParams(cap=1.0, w_policy=w, i_pick=i, safe=True)
           for w in ("fit", "fill") for i in ("mb", "deep")]


def best(case, variants) -> float | None:
    values = []
    for params in variants:
        try:
            sim = validate(case.inst, greedy(case.inst, params))
        except _Deadlock:
            continue
        values.append(sim.max_span if case.objective == "span" else sim.makespan)
    return min(values, default=None)


def grid(case) -> str:
    cells = []
    for safe in (False, True):
        for cap in CAPS:
            value = best(case, [GreedyParams(cap=cap, w_policy=w, i_pick=i, f_pick=f, safe=safe)
                                for w in ("fit", "fill") for i, f in PICKS])
            cells.append(f"{'mem' if cap is None else cap}{'S' if safe else ''}:{value:g}")
    return " ".join(cells)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("grid", "ab"):
        print("usage: greedy_caps.py grid CASE [CASE ...] | ab PREFIX [PREFIX ...]", file=sys.stderr)
        return 1
    cases = build_cases()
    if argv[0] == "grid":
        by_id = {c.id: c for c in cases}
        for name in argv[1:]:
            if name not in by_id:
                print(f"greedy_caps.py: no bench case {name}", file=sys.stderr)
                return 1
            print(name, grid(by_id[name]), flush=True)
        return 0
    for case in cases:
        inst = case.inst
        if (inst.chunks < 2 or not any(case.id.startswith(p) for p in argv[1:])
                or TaskGraph(inst).count() > 20000):
            continue
        t0 = time.monotonic()
        before = best(case, [v for v in default_variants(inst) if v not in CAP_ONE])
        t1 = time.monotonic()
        after = min(x for x in (before, best(case, CAP_ONE)) if x is not None)
        t2 = time.monotonic()
        mark = "  lower" if before is not None and after < before - 1e-9 else ""
        print(f"{case.id:30s} before {before:g} after {after:g} "
              f"({t1 - t0:.1f} s + {t2 - t1:.1f} s){mark}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
