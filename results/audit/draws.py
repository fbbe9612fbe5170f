"""The random instances every audit draws, and the loop that prints a JSON line per draw.

Draw k of seed S uses ``random.Random(S * 100003 + k)``: devices 2-3 and 2-4 microbatches
(above ``SMALL_OPS`` ops allowed: up to 4 devices and 8 microbatches), one or two chunks (V,
loop or explicit), one or two replicas, overlapped forward/backward pairs, recompute and
offload, step jobs, sequence segments, comm, resident parameters, and (four draws in five) a
memory limit from the least feasible one up, each feature drawn on its own; then their
variants: selective recompute, part of the activation offloaded, a second copy stream,
slower loads, the replicas' gradient all-reduce, per-stage step times, unequal segments.
What ``load_instance`` refuses, or what has more ops than allowed, is drawn again.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, load_instance
from zbsolve.solver.bounds import min_memory_limit

SMALL_OPS = 40


def draw(rng: random.Random, larger: bool) -> dict:
    """One instance's fields (``load_instance`` may refuse the combination)."""
    p = rng.choice([2, 3, 4] if larger else [2, 3])
    kind = rng.choice(["one", "v", "loop", "explicit"])
    v = 1 if kind == "one" else 2
    n = p * v
    data: dict = {"devices": p, "microbatches": rng.randint(2, 8 if larger else 4), "chunks": v,
                  "replicas": rng.choice([1, 1, 2]), "comm": rng.choice([0, 0, 1])}
    if v == 2:
        data["placement"] = (rng.sample([d for d in range(p) for _ in range(v)], n)
                             if kind == "explicit" else kind)
    data["times"] = {k: [rng.randint(1, 4) for _ in range(n)] for k in "FIW"}
    act = [float(rng.choice([1, 1, 2])) for _ in range(n)]
    data["memory"] = {"activation": act,
                      "weight": [a * rng.choice([0.0, 0.5]) for a in act],
                      "params": rng.choice([0.0, 0.0, 0.5])}
    if rng.random() < 0.3:
        data["overlap"] = {"FB": rng.choice([0.5, 0.8])}
    if rng.random() < 0.3:
        data["recompute"] = {"R": rng.choice([1, 2]), "kept": [a * 0.25 for a in act]}
    if rng.random() < 0.2:
        data["offload"] = {"d2h": rng.choice([0.5, 1.0])}
    if rng.random() < 0.3:
        data["step"] = {"mode": rng.choice(["sync", "post-validation"]),
                        "optimizer": rng.choice([1, 2]), "allreduce": rng.choice([0, 1]),
                        "check": rng.choice([0, 0.5])}
    if rng.random() < 0.2:
        data["segments"] = 2
    # the variants, drawn last so that the features above stay as they were drawn before
    if "recompute" in data and rng.random() < 0.4:
        data["recompute"].update(R_selective=rng.choice([0.5, 1]),
                                 kept_selective=[a * 0.5 for a in act])
    if "offload" in data and rng.random() < 0.5:
        data["offload"].update(fraction=rng.choice([0.5, 1.0]), streams=rng.choice([1, 2]),
                               h2d=rng.choice([0.5, 1.0, 2.0]))
    if data["replicas"] == 2 and rng.random() < 0.5:
        data["sync"] = rng.choice([0.5, 1.0])
    if "step" in data and rng.random() < 0.4:
        data["step"]["optimizer"] = [rng.choice([0.5, 1, 2]) for _ in range(n)]
    if "segments" in data and rng.random() < 0.5:
        data["segment_lengths"] = [0.6, 0.4]
    return data


def instance(rng: random.Random, max_ops: int = SMALL_OPS) -> Instance:
    """A drawn instance that loads and has at most ``max_ops`` ops; most have a limit."""
    while True:
        try:
            free = load_instance(draw(rng, max_ops > SMALL_OPS))
            if TaskGraph(free).count() > max_ops:
                continue
            need = min_memory_limit(free)
            if rng.random() < 0.8:
                free = free.with_(limit=[x + rng.choice([0, 0.5, 1, 2]) for x in need])
            return free
        except (ValueError, TypeError, KeyError):
            continue


Audit = Callable[[Instance, random.Random], dict]


def run_draws(argv: list[str], usage: str, audit: Callable[[list[str]], tuple[Audit, int]]
              ) -> int:
    """``SEED COUNT [extra...]`` from ``argv``. ``audit(extra)`` reads the script's own
    arguments and gives the function that audits one draw and the most ops a draw may have;
    ``one(inst, rng)`` gives the draw's line (``"bad"``: the findings; ``"skipped"``: why it
    was not audited; ``"counts"``: numbers the last line sums). An exception is a finding."""
    try:
        seed, count = int(argv[0]), int(argv[1])
        one, max_ops = audit(argv[2:])
    except (IndexError, ValueError):
        print(usage, file=sys.stderr)
        return 2
    tally: Counter = Counter()
    began = time.monotonic()
    for k in range(count):
        rng = random.Random(seed * 100003 + k)
        inst = instance(rng, max_ops)
        try:
            row = one(inst, rng)
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, named on its line
            row = {"instance": inst.to_dict(), "bad": [f"crash: {type(exc).__name__}: {exc}"]}
        row["draw"] = [seed, k]
        tally["instances"] += 1
        tally["skipped"] += "skipped" in row
        tally["with findings"] += bool(row["bad"])
        tally.update(row.get("counts", {}))
        print(json.dumps(row), flush=True)
    tally["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps({"tally": dict(tally)}), flush=True)
    return 0
