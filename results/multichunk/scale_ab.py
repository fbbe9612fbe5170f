"""An instance whose memory is in GiB counted from bytes (a planned model's), solved at
FACTOR x its least feasible limits (``min_memory_limit``), with the model's scale: the
thirty-fifth pass compares the code before exact memory demands (limits rounded down,
``model._fraction_scale``; a worktree on PYTHONPATH) with the code after. 2 workers, seed 0,
the makespan.

    python results/multichunk/scale_ab.py SECONDS FACTOR[,FACTOR...] INSTANCE.yaml
"""

from __future__ import annotations

import json
import math
import sys

from zbsolve.instance import InstanceError, load_instance
from zbsolve.solver.api import SolveOptions, SolveResult, solve
from zbsolve.solver.bounds import min_memory_limit

USAGE = "usage: scale_ab.py SECONDS FACTOR[,FACTOR...] INSTANCE.yaml"


def main(argv: list[str]) -> int:
    try:
        seconds, factors = float(argv[0]), [float(f) for f in argv[1].split(",")]
        path = argv[2]
    except (IndexError, ValueError):
        seconds, factors, path = -1.0, [], ""
    if (len(argv) != 3 or not (0 < seconds and math.isfinite(seconds))
            or not all(f >= 1 and math.isfinite(f) for f in factors)):
        print(f"{USAGE} (got {argv})", file=sys.stderr)
        return 2
    try:
        base = load_instance(path)
    except (InstanceError, OSError) as e:
        print(f"scale_ab.py: {e}", file=sys.stderr)
        return 2
    need = min_memory_limit(base)
    for f in factors:
        inst = base.with_(limit=[x * f for x in need])
        res = solve(inst, SolveOptions(time_limit=seconds, seed=0))
        print(summary(res, factor=f, time_limit=seconds), flush=True)
    return 0


def summary(res: SolveResult, **fields: object) -> str:
    """One JSON line: ``fields``, then the model's scale, value, bound, gap, status, how the
    window search ended, where the schedule came from and the best hand-made value (also
    read by ``snake_scale.py``)."""
    info = res.schedule.meta["solver"]
    windows = info.get("windows")
    return json.dumps({
        **fields, "scale": info.get("scale"),
        "value": round(res.objective_value, 6), "bound": round(res.lower_bound, 6),
        "gap_pct": round(100 * res.gap, 3), "status": res.status,
        "windows": windows.get("ended") if isinstance(windows, dict) else windows,
        "source": res.schedule.meta["source"],
        "hand_made": res.baseline_value and round(res.baseline_value, 6)})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
