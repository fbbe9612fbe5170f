"""How often a proven reduced schedule stretches well (issue 18, fifteenth pass).

Solves the bench case's instance with M' microbatches (``stretch.reduced``) once per seed, as the
stretch phase does (exact method, span, 2 workers, SECONDS), then counts the stretches of each
optimum to the case's m that the simulator accepts, two ways:

- ``cut``: ``stretch.stretched``, the product's alignment (each device's block nearest to its
  first stage's forward of one microbatch);
- ``time``: a scratch alternative, not in the product: each device's block nearest in time
  (the reduced schedule simulated) to the start of one forward.

    python results/multichunk/reduced_seeds.py vhalf/p8-m32 12 40 0 1 2 3 4 5

Prints one line per seed: status, value, and per alignment (tried, valid, best span, seconds).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator

from zbsolve.bench import build_cases, select
from zbsolve.instance import Instance
from zbsolve.ops import Kind, Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate, validate
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.stretch import blocks, reduced, refill_weight_grads, repeat_block, stretched


def block_near(order: list[Op], delta: int, n: int, at: float,
               start: dict[Op, float]) -> list[Op] | None:
    """``stretch.stretch_order`` with the block chosen nearest in time to ``at``."""
    best = None
    for first, end in blocks(order, n):
        t0, t1 = start[order[first]], start[order[end - 1]]
        dist = 0.0 if t0 <= at <= t1 else min(abs(at - t0), abs(at - t1))
        if best is None or dist < best[0]:
            best = (dist, first, end)
    return None if best is None else repeat_block(order, best[1], best[2], delta, n)


def by_time(inst: Instance, small_inst: Instance, small: Schedule) -> Iterator[Schedule]:
    start = simulate(small_inst, small).start
    delta = inst.microbatches - small_inst.microbatches
    rows = [list(r) for r in small.orders]
    bare = [[op for op in r if op.kind != Kind.W] for r in rows]
    anchors = sorted({start[op] for r in rows for op in r if op.kind == Kind.F})
    seen: set = set()
    for n in (k for k in range(1, 5) if delta % k == 0):
        for at in anchors:
            for variant, base in (("as-is", rows), ("refilled", bare)):
                full = [block_near(r, delta, n, at, start) for r in base]
                if any(r is None for r in full):
                    continue
                if variant == "refilled" and (full := refill_weight_grads(inst, full)) is None:
                    continue
                key = tuple(tuple(r) for r in full)
                if key not in seen:
                    seen.add(key)
                    yield Schedule(full, name=f"time-n{n}-{variant}")


def count(inst: Instance, candidates: Iterator[Schedule]) -> tuple:
    t0, tried, valid, best = time.time(), 0, 0, None
    for cand in candidates:
        tried += 1
        try:
            value = validate(inst, cand).value("span")
        except ScheduleError:
            continue
        valid += 1
        best = value if best is None else min(best, value)
    return tried, valid, best, round(time.time() - t0, 1)


USAGE = "usage: reduced_seeds.py CASE M' SECONDS SEED [SEED ...]"


def main() -> None:
    if len(sys.argv) < 5:
        raise SystemExit(USAGE)
    case = [c for c in select(build_cases(), [sys.argv[1]]) if c.id == sys.argv[1]]
    if len(case) != 1:
        raise SystemExit(f"{USAGE}: {sys.argv[1]!r} is not one bench case (zbsolve bench --list)")
    inst = case[0].inst
    try:
        m_small, seconds = int(sys.argv[2]), float(sys.argv[3])
        seeds = [int(s) for s in sys.argv[4:]]
    except ValueError as err:
        raise SystemExit(f"{USAGE}: M' and SEED are integers, SECONDS a number ({err})") from None
    if not 1 <= m_small < inst.microbatches:
        raise SystemExit(f"{USAGE}: M' must be in 1 .. {inst.microbatches - 1}, got {m_small}")
    if not (seconds > 0 and math.isfinite(seconds)) or not all(0 <= s < 2**31 for s in seeds):
        raise SystemExit(f"{USAGE}: SECONDS must be finite and above 0, and each SEED in [0, 2**31)")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; command: python "
          f"results/multichunk/reduced_seeds.py {' '.join(sys.argv[1:])}", flush=True)
    for seed in seeds:
        small_inst = reduced(inst, m_small)
        res = solve(small_inst, SolveOptions(time_limit=seconds, workers=2, seed=seed,
                                             objective="span", memory_tiebreak=False,
                                             method="exact"))
        print(f"seed {seed}: {res.status} {res.objective_value:g}; cut (tried, valid, best, s) "
              f"{count(inst, stretched(inst, res.schedule))}; time "
              f"{count(inst, by_time(inst, small_inst, res.schedule))}", flush=True)


if __name__ == "__main__":
    main()
