"""Is the published ZB-V optimal on small settings? The branch and bound over device orders
(``zbsolve.solver.exhaustive``, independent of the CP-SAT model) with ZB-V's span as the value
to beat, on the 6.2B ZB-V row's times at p devices, m microbatches, limit 2p (1F1B's memory):

    python results/multichunk/exhaustive_zbv.py P M[,M...] NODES

Per m: ZB-V's span, the analytic bound, and whether the search proved that nothing is shorter
(proven, no schedule found), found a shorter schedule (its span, checked by the simulator), or
ran out of nodes.
"""

from __future__ import annotations

import sys
import time

from zbv_idle import six_b_times

from zbsolve.baselines import generate
from zbsolve.simulate import validate
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.exhaustive import solve_exhaustive


def main(args: list[str]) -> None:
    try:
        p, ms, nodes = int(args[0]), [int(m) for m in args[1].split(",")], int(args[2])
    except (IndexError, ValueError):
        sys.exit("usage: exhaustive_zbv.py P M[,M...] NODES (e.g. 2 3,4 400000)")
    if p < 2 or nodes < 1 or any(m < 1 for m in ms):
        sys.exit("exhaustive_zbv.py: P >= 2, every M >= 1 and NODES >= 1")
    for m in ms:
        inst = six_b_times(p, m)
        zbv = validate(inst, generate("zb-v", inst)).value("span")
        t0 = time.perf_counter()
        res = solve_exhaustive(inst, "span", upper=zbv, max_nodes=nodes)
        seconds = time.perf_counter() - t0
        if res.schedule is not None:
            found = f"shorter: {validate(inst, res.schedule).value('span'):.2f}"
        else:
            found = "nothing shorter" if res.proven else "nothing shorter found"
        print(f"p={p} m={m} ({6 * p * m} ops): "
              f"zb-v {zbv:.2f}, bound {analytic_bound(inst, 'span'):.2f}; search: {found}, "
              f"{'proven' if res.proven else 'out of nodes'} after {res.nodes} nodes, "
              f"{seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
