"""Offline validity check of the analytic bound (issue 18): on seeded random tiny multi-chunk
instances (p = 2-3, v = 2-3, m = 2-5, V / loop / explicit, integer times 1-4, comm 0-1,
activations 1-2, weights 0 or half, limits from the minimum to +3), both objectives:
analytic bound <= the unreduced model's proven optimum (no symmetry, no memory precedences, no
bound on the objective), and the solver's reduced model proves the same optimum.

usage: python results/multichunk/check_bounds.py SEED COUNT   (prints VIOLATION lines, a summary)
Instances whose unreduced optimum is not proven in 15 s (one worker) are skipped and counted.
"""
import random, sys, json
from ortools.sat.python import cp_model
from zbsolve.instance import load_instance
from zbsolve.solver.bounds import analytic_bound, min_memory_limit
from zbsolve.solver.model import build_model
def opt(inst, obj, **kw):
    sm = build_model(inst, obj, **kw); s = cp_model.CpSolver()
    s.parameters.num_workers = 1; s.parameters.random_seed = 0; s.parameters.max_time_in_seconds = 15
    return (s.objective_value / sm.scale.time) if s.solve(sm.model) == cp_model.OPTIMAL else None
rng = random.Random(int(sys.argv[1])); n_ok = n_skip = 0; gaps = []
for k in range(int(sys.argv[2])):
    p = rng.choice([2, 3]); v = rng.choice([2, 3] if p == 2 else [2])
    kind = rng.choice(["v", "loop", "explicit"] if v == 2 else ["loop", "explicit"])
    m = rng.randint(2, 5 if p * v <= 4 else 4); n = p * v
    placement = kind
    if kind == "explicit":
        placement = [d for d in range(p) for _ in range(v)]; rng.shuffle(placement)
    times = {key: [rng.randint(1, 4) for _ in range(n)] for key in "FIW"}
    act = [rng.choice([1.0, 2.0]) for _ in range(n)]
    data = {"devices": p, "microbatches": m, "chunks": v, "placement": placement, "times": times,
            "comm": rng.choice([0, 1]), "memory": {"activation": act, "weight": [a * rng.choice([0, 0.5]) for a in act]}}
    need = min_memory_limit(load_instance(data))
    data["memory"]["limit"] = [x + rng.choice([0, 0, 0.5, 1, 2, 3]) for x in need]
    inst = load_instance(data)
    for obj in ("makespan", "span"):
        b = analytic_bound(inst, obj); o = opt(inst, obj, symmetry=False, redundant=False)
        if o is None:
            n_skip += 1; continue
        r = opt(inst, obj)
        ok = b <= o + 1e-9 and (r is None or abs(r - o) < 1e-6)
        n_ok += ok; gaps.append((o - b) / o)
        if not ok:
            print("VIOLATION", json.dumps(data), obj, b, o, r, flush=True)
print("checked", n_ok, "skipped", n_skip, "mean gap %.2f%%" % (100 * sum(gaps) / max(1, len(gaps))), flush=True)
