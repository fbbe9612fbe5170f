"""Check that a change to ``zbsolve/solver/bounds.py`` keeps every value bit-identical.

Loads ``bounds.py`` of an older commit beside today's and compares, exactly, on random
instances (replicas, sync, segments, overlapped pairs, recompute, offload, both step modes,
params, limits from 0.6 to 3 times the minimum): heads and tails (ordered, unordered, from a
source), every device's tails, the per-device bounds, the memory end bounds, the critical
path, the memory minimum, ``analytic_bound`` for both objectives and the serial schedule; and
``_knapsack_lp`` on random items. Where the old code raises (limits below the minimum: the
memory edges' lags fall to 0), the new must raise the same exception type.

    .venv/bin/python results/mutation/compare_bounds.py 0a9bbe6 0 300   # commit, seed, count
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from zbsolve.instance import InstanceError, load_instance
from zbsolve.ops import Op
from zbsolve.solver import bounds as new


def load_old(commit: str):
    text = subprocess.run(["git", "show", f"{commit}:zbsolve/solver/bounds.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_bounds.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_bounds", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_bounds"] = module
    spec.loader.exec_module(module)
    return module


def rnd(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), rng.choice([0, 1, 3]))


def instance(rng: random.Random):
    p, v, R = rng.randint(1, 4), rng.choice([1, 1, 2]), rng.choice([1, 1, 1, 2])
    m, S = rng.randint(1, 6) * R, p * v
    d = {"devices": p, "microbatches": m, "chunks": v,
         "placement": rng.choice(["loop", "vshape"]) if v > 1 else "loop",
         "times": {k: [max(0.1, rnd(rng, 0.1, 3)) for _ in range(S)] for k in "FIW"},
         "comm": rnd(rng, 0, 1)}
    if R == 2:
        d["replicas"] = 2
        if rng.random() < 0.5:
            d["sync"] = rnd(rng, 0.1, 2)
    act = [max(0.1, rnd(rng, 0.1, 3)) for _ in range(S)]
    d["memory"] = {"activation": act,
                   "weight": [round(a * rng.choice([0, 0.25, 0.5]), 3) for a in act]}
    if rng.random() < 0.3:
        d["memory"]["params"] = rnd(rng, 0, 1)
    feature = rng.random()
    if feature < 0.15:
        d["segments"] = 2
    elif feature < 0.3:
        d["overlap"] = {"FB": 0.8}
    elif feature < 0.4:
        d["recompute"] = {"R": 0.5, "kept": 0.25}
    elif feature < 0.5:
        d["offload"] = {"fraction": 0.5, "d2h": 0.5}
    if rng.random() < 0.3:
        d["step"] = rng.choice([{"mode": "sync", "optimizer": 1.5, "allreduce": 0.7, "check": 0.3},
                                {"mode": "post-validation", "optimizer": 1, "allreduce": 0.5}])
    inst = load_instance(d)
    if rng.random() < 0.8:
        need = new.min_memory_limit(inst)
        d["memory"]["limit"] = [round(x * rng.uniform(0.6, 3), 3) for x in need]
        inst = load_instance(d)
    return inst


def run(f, *args, **kw):
    try:
        return f(*args, **kw)
    except Exception as e:  # compared by type: the new code must fail where the old did
        return type(e).__name__


def compare(old, inst) -> bool:
    """Asserts equality of everything; True where the old code raised."""
    def same(name, a, b):
        assert a == b, (name, inst, a, b)

    raised = False
    for ordered in (True, False):
        a = run(old.heads_tails, inst, ordered=ordered)
        b = run(new.heads_tails, inst, ordered=ordered)
        if isinstance(a, str):
            same("error", a, b)
            raised = True
            continue
        same("head", a.head, b.head), same("tail", a.tail, b.tail)
        same("ordered", a.ordered, b.ordered)
        s = inst.stages_of(0)[0]
        src = Op("F", s, inst.microbatches_of(s)[-1])
        a, b = old.heads_tails(inst, ordered, src), new.heads_tails(inst, ordered, src)
        same("source head", a.head, b.head), same("source tail", a.tail, b.tail)
        for d in range(inst.devices):
            same("device_tails", old.device_tails(inst, old.heads_tails(inst, ordered=ordered), d),
                 new.device_tails(inst, new.heads_tails(inst, ordered=ordered), d))
    for f in ("device_makespan_bounds", "device_span_bounds", "device_lower_bounds",
              "memory_end_bounds", "critical_path", "min_memory_limit"):
        same(f, run(getattr(old, f), inst), run(getattr(new, f), inst))
    for objective in ("makespan", "span"):
        same(objective, run(old.analytic_bound, inst, objective),
             run(new.analytic_bound, inst, objective))
    same("serial", old.serial_schedule(inst).orders, new.serial_schedule(inst).orders)
    return raised


def main(commit: str, seed: int, count: int) -> None:
    old, rng = load_old(commit), random.Random(seed)
    done = raised = with_end_bound = 0
    while done < count:
        try:
            inst = instance(rng)
        except InstanceError:
            continue
        done += 1
        raised += compare(old, inst)
        with_end_bound += any(b is not None for b in run(new.memory_end_bounds, inst))
    for _ in range(20000):  # callers pass count m >= 1 and m - 1 >= 1 (m >= 2 where it binds)
        items = [(rng.choice([0, rnd(rng, 0, 4)]), rng.choice([0, rnd(rng, 0, 4)]))
                 for _ in range(rng.randint(0, 5))]
        room, n = rnd(rng, -1, 8), rng.randint(1, 5)
        assert old._knapsack_lp(items, room, n) == new._knapsack_lp(items, room, n), items
    print(f"identical: {done} instances ({with_end_bound} with a memory end bound, {raised} "
          f"where both raise), 20000 knapsack LPs")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
