"""Sweep points of the planned Llama, the memory rounded as before the exact demands or not.

    python results/multichunk/thirtyfifth/rounding_ab.py [--need] INSTANCE.yaml old|new \
        FRACTIONS SEEDS

Every limit at each FRACTION (comma list) of the instance's 1F1B peak (0.136962890625 GiB,
what ``zbsolve sweep`` reports for ``llama-plan-p4-v2-m8.yaml``; with ``--need``, of each
device's least feasible limit, ``min_memory_limit``, as ``scale_ab.py`` does), solved with
each SEED (comma list), 10 s of CP-SAT's deterministic time, 2 workers: the same answer on
any machine. ``old`` gives the model the scale it had before 82443dd (memory at 10,000,
demands rounded up and limits down, wherever no power of ten makes demands and limits
integers); ``new`` today's.
"""

import dataclasses
import json
import sys

import zbsolve.solver.model as M
from zbsolve.instance import load_instance
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.bounds import min_memory_limit

PEAK = 0.136962890625

USAGE = "usage: rounding_ab.py [--need] INSTANCE.yaml old|new FRACTIONS SEEDS"
need = sys.argv[1:2] == ["--need"]
if need:
    del sys.argv[1]
try:
    base = load_instance(sys.argv[1])
    mode = sys.argv[2]
    fractions = [float(x) for x in sys.argv[3].split(",")]
    seeds = [int(x) for x in sys.argv[4].split(",")]
    assert len(sys.argv) == 5 and mode in ("old", "new")
except (IndexError, ValueError, AssertionError, OSError) as e:  # InstanceError is a ValueError
    print(f"{USAGE} ({str(e) or sys.argv[1:]})", file=sys.stderr)
    sys.exit(2)
if mode == "old":
    chosen = M.TimeScale.choose

    def choose(inst):
        sc = chosen(inst)
        mems = [x for x in (*M._unit_memories(inst), *inst.params, *M._mode_memory(inst),
                            *(v for v in inst.limit if v is not None)) if x > 0]
        if M._pick_scale(mems, exact=True) is None:
            return dataclasses.replace(sc, memory=10**4, memory_exact=False)
        return sc
    M.TimeScale.choose = staticmethod(choose)
for frac in fractions:
    for seed in seeds:
        inst = base.with_(limit=[frac * x for x in min_memory_limit(base)] if need
                          else [frac * PEAK] * base.devices)
        res = solve(inst, SolveOptions(time_limit=10, seed=seed, deterministic=True))
        print(json.dumps({
            "mode": mode, "of": "need" if need else "1F1B peak", "frac": frac, "seed": seed,
            "scale": res.schedule.meta["solver"]["scale"]["memory"],
            "value": round(res.objective_value, 4), "bound": round(res.lower_bound, 4),
            "status": res.status, "source": res.schedule.meta["source"]}), flush=True)
