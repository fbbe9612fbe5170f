"""The stretch phase's reduced solve (m' = 12 of vhalf/p8-m32 and vmin/p8-m32, 60 s, seeds 0 and 1)
with and without the window phase. Run: python results/multichunk/fifteenth/reduced_windows.py
(output: reduced_windows.txt: case, m', phase, seed, status, value, wall seconds, proof time)."""

from __future__ import annotations

import time

from zbsolve.bench import build_cases, select
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.stretch import reduced


def main() -> None:
    for cid, m_small in (("vhalf/p8-m32", 12), ("vmin/p8-m32", 12)):
        inst = next(c for c in select(build_cases(), [cid]) if c.id == cid).inst
        for windows in (True, False):
            for seed in (0, 1):
                t0 = time.time()
                res = solve(reduced(inst, m_small),
                            SolveOptions(time_limit=60, workers=2, seed=seed, objective="span",
                                         memory_tiebreak=False, method="exact", windows=windows))
                print(cid, m_small, "windows" if windows else "no-windows", seed, res.status,
                      res.objective_value, round(time.time() - t0, 1),
                      res.schedule.meta["solver"].get("proof_time"), flush=True)


if __name__ == "__main__":
    main()
