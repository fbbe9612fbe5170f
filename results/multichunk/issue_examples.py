"""The three examples issue 18 opens with, solved by today's default solver.

- ZB-V times at p = 4, m = 16: the 6.2B ZB-V row's per-chunk times and memory (limit 2p,
  ``zbv_idle.six_b_times``), span objective;
- V-Min memory at p = 8, m = 16: the bench case ``vmin/p8-m16`` (unit times, the published
  V-Min peak), span objective, 20 s as in the issue;
- an explicit snake placement with three chunks per device at p = 4, m = 12: the same 6.2B
  model cut into 12 stages (each chunk's times, activation and weights two thirds of a V
  chunk's), stage s on device s mod p going down, up, down; the same memory as the first
  (8: 1F1B's), makespan objective.

Each line: the case, the solver's value and bound, its gap and status, when it was proven,
and the best hand-made schedule that fits.

    python results/multichunk/issue_examples.py SECONDS   (the V-Min row always gets 20 s)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from zbv_idle import six_b_times  # noqa: E402

from zbsolve.bench import build_cases  # noqa: E402
from zbsolve.instance import Instance, load_instance  # noqa: E402
from zbsolve.solver.api import SolveOptions, solve  # noqa: E402


def snake(p: int = 4, m: int = 12, v: int = 3) -> Instance:
    share = 2 / v  # a V chunk is 1/(2p) of the model, this one 1/(vp)
    return load_instance({
        "name": f"zbv-6.2b-times-snake-v{v}-p{p}-m{m}", "devices": p, "microbatches": m,
        "chunks": v,
        "placement": [s % p if (s // p) % 2 == 0 else p - 1 - s % p for s in range(p * v)],
        "times": {"F": 14.41 * share, "I": 14.38 * share, "W": 9.68 * share}, "comm": 1.61,
        "memory": {"activation": share, "weight": 0.432 * share, "limit": 2 * p}})


def main(argv: list[str]) -> int:
    try:
        seconds = float(argv[0]) if argv else 60.0
    except ValueError:
        seconds = -1.0
    if len(argv) > 1 or not 0 < seconds < float("inf"):
        print(f"issue_examples.py: SECONDS: expected one positive number, got {argv}",
              file=sys.stderr)
        return 2
    vmin = next(c.inst for c in build_cases() if c.id == "vmin/p8-m16")
    for inst, objective, limit in ((six_b_times(4, 16), "span", seconds),
                                   (vmin, "span", 20.0), (snake(), "makespan", seconds)):
        res = solve(inst, SolveOptions(time_limit=limit, objective=objective, seed=0))
        info = res.schedule.meta["solver"]
        print(json.dumps({
            "case": inst.name, "ops": len(res.schedule), "objective": objective,
            "time_limit": limit, "value": round(res.objective_value, 4),
            "bound": round(res.lower_bound, 4), "gap_pct": round(100 * res.gap, 3),
            "status": res.status, "proof_time": info.get("proof_time"),
            "hand_made": res.baseline, "hand_made_value": res.baseline_value}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
