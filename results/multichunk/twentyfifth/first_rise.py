"""When the memory-state bound first passes the analytic bound (the twenty-fifth pass's reason
for ``api.STATE_PATIENCE``): per bench case, the box count of the first rise, the bound then,
and where a search of BOXES boxes ends.

    python results/multichunk/twentyfifth/first_rise.py 6000 'zbv/*' 'vmin/p16-m32' 'vmin/p4*' 'vhalf/p4*'
"""

from __future__ import annotations

import sys
import time

from zbsolve import bench
from zbsolve.solver import state_bound as sb
from zbsolve.solver.bounds import analytic_bound


def main(args: list[str]) -> None:
    usage = "usage: first_rise.py BOXES PATTERN..."
    try:
        boxes = int(args[0])
    except (ValueError, IndexError):
        sys.exit(usage)
    cases = bench.select(bench.build_cases(), args[1:]) if len(args) > 1 else []
    if boxes < 1 or not cases:
        sys.exit(f"{usage} (BOXES at least 1, a pattern that matches a bench case)")
    sb.REPORT_EVERY = 0.0  # hear every rise
    for case in cases:
        floor = analytic_bound(case.inst, "span")
        first: list[tuple[int, float]] = []

        def heard(value: float, count: int, floor: float = floor,
                  first: list[tuple[int, float]] = first) -> None:
            if value > floor + 1e-6 and not first:
                first.append((count, value))

        t0 = time.monotonic()
        got = sb.state_bound(case.inst, "span", boxes=boxes, report=heard)
        rise = f"first above it at box {first[0][0]} ({first[0][1]:.2f})" if first else "never above it"
        print(f"{case.id}: analytic {floor:.2f}, {rise}; after {got.boxes} boxes "
              f"{got.value:.2f} ({'every vector' if got.exact else 'cut'}, "
              f"{time.monotonic() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
