"""DualPipe and DualPipeV instances under a limit between their least feasible one and their
own peak (issue 18, "Pairs the memory cannot hold" in docs/solver.md): how many overlapped
pair options fit the memory, the analytic bound, and the default solve.

The instances are the bidirectional bench's (``zbsolve.bench_bidirectional``, x = 0.8) with
every device's limit at need + FRAC (peak - need): need the least feasible limit
(``bounds.min_memory_limit``), peak the family's own peak (the bench's limit).

    python results/bidirectional/tight_pairs.py bounds
    python results/bidirectional/tight_pairs.py solve 20 dualpipe:4:8:0.15 dualpipev:4:8:0.25
"""

from __future__ import annotations

import math
import sys

from zbsolve.bench_bidirectional import _two_replicas, _v, at_own_peak
from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, InstanceError
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.bounds import analytic_bound, min_memory_limit

USAGE = ("usage: tight_pairs.py bounds | tight_pairs.py solve SECONDS FAMILY:P:M:FRAC...  "
         "(FAMILY dualpipe or dualpipev)")
FRACS = (0.0, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0)
SIZES = ((4, 8), (4, 16), (8, 16))


def instance(family: str, p: int, m: int, frac: float) -> Instance:
    inst = _v(p, m, 0.8) if family == "dualpipev" else _two_replicas(p, m, 0.8)
    limited, _ = at_own_peak(family, inst)
    need = min_memory_limit(limited)
    return limited.with_(limit=[n + frac * (peak - n) for n, peak in zip(need, limited.limit)])


def main(argv: list[str]) -> None:
    if argv[:1] == ["bounds"]:
        for family in ("dualpipe", "dualpipev"):
            for p, m in SIZES:
                for frac in FRACS:
                    inst = instance(family, p, m, frac)
                    graph = TaskGraph(inst)
                    pairs = sum(len(list(graph.pair_options(d))) for d in range(p))
                    print(f"{family:9s} p{p} m{m:<3d} frac {frac:4.2f} limit {inst.limit[0]:6.2f} "
                          f"pair options {pairs:2d} bound {analytic_bound(inst):8.2f}", flush=True)
        return
    if argv[:1] != ["solve"] or len(argv) < 3:
        sys.exit(USAGE)
    try:
        seconds = float(argv[1])
        specs = [(f, int(p), int(m), float(x)) for f, p, m, x in (a.split(":") for a in argv[2:])]
    except ValueError:
        sys.exit(USAGE)
    if not (seconds > 0 and math.isfinite(seconds)) or any(
            f not in ("dualpipe", "dualpipev") or not 0 <= x <= 1 for f, _, _, x in specs):
        sys.exit(USAGE)
    try:  # every instance before the first solve: a bad size stops nothing half-way
        instances = [instance(*spec) for spec in specs]
    except (InstanceError, ValueError) as err:
        sys.exit(f"{USAGE}: {err}")
    for (family, p, m, frac), inst in zip(specs, instances):
        r = solve(inst, SolveOptions(time_limit=seconds, objective="makespan"))
        proof = r.schedule.meta["solver"].get("proof_time")
        print(f"{family:9s} p{p} m{m:<3d} frac {frac:4.2f} {r.status:8s} {r.objective_value:9.2f} "
              f"bound {r.lower_bound:9.2f} analytic {r.analytic_bound:9.2f} gap "
              f"{100 * r.gap:6.2f}% proof {'-' if proof is None else f'{proof:.1f} s'}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
