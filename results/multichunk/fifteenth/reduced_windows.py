"""The stretch phase's reduced solve (m' = 12 of vhalf/p8-m32 and vmin/p8-m32, 60 s, seeds 0 and 1)
with and without the window phase. Run: python results/multichunk/fifteenth/reduced_windows.py
(output: reduced_windows.txt)."""
import sys, time
from zbsolve.bench import build_cases, select
from zbsolve.solver import SolveOptions, solve
from zbsolve.solver.stretch import reduced
for cid, mp in (("vhalf/p8-m32", 12), ("vmin/p8-m32", 12)):
    inst = [c for c in select(build_cases(), [cid]) if c.id == cid][0].inst
    for windows in (True, False):
        for seed in (0, 1):
            t = time.time()
            r = solve(reduced(inst, mp), SolveOptions(time_limit=60, workers=2, seed=seed, objective="span",
                      memory_tiebreak=False, method="exact", windows=windows))
            s = r.schedule.meta["solver"]
            print(cid, mp, "windows" if windows else "no-windows", seed, r.status, r.objective_value,
                  round(time.time() - t, 1), s.get("proof_time"), flush=True)
