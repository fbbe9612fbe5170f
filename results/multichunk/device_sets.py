"""Relaxations with several devices kept exact, for choosing the set (issue 18, thirty-first
pass; ``relaxation.relax_device(also=...)``, projected where it applies). Three probes:

- ``pairs CASE BASE SECONDS [FLOOR]``: BASE (devices joined by +) with each other device,
  for SECONDS each, FLOOR (instance units; default the analytic bound) as the lower bound;
- ``grow CASE START SECONDS STEPS``: from device START, add the device the last relaxation's
  schedule overloads most (``Relaxation.overload``), STEPS times;
- ``keep CASE DEVICES RELAX_SECONDS KEEP_SECONDS [KEPT...]``: relax DEVICES, then keep the
  relaxed order of each set KEPT (default: all of DEVICES) on the whole model for
  KEEP_SECONDS, no hint; prints CP-SAT's status and the simulated value.

2 workers, seed 0.

    python results/multichunk/device_sets.py pairs random/random-01 0 1.5 1398
    python results/multichunk/device_sets.py grow random/random-01 0 60 5
    python results/multichunk/device_sets.py keep random/random-01 0+3 15 30 0 0+3
"""

from __future__ import annotations

import math
import sys
import time

from zbsolve.bench import build_cases
from zbsolve.schedule import Schedule
from zbsolve.simulate import simulate
from zbsolve.solver import projected, relaxation
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver
from zbsolve.solver.model import TimeScale, build_model

USAGE = ("usage: device_sets.py pairs CASE BASE SECONDS [FLOOR] | grow CASE START SECONDS "
         "STEPS | keep CASE DEVICES RELAX_SECONDS KEEP_SECONDS [KEPT...]  (devices: 0+3)")


def _seconds(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"expected seconds > 0, got {text!r}")
    return value


def _devices(text: str, count: int) -> list[int]:
    devices = [int(d) for d in text.split("+")]
    if not all(0 <= d < count for d in devices) or len(set(devices)) < len(devices):
        raise ValueError(f"expected distinct devices 0..{count - 1} joined by +, got {text!r}")
    return devices


def main(argv: list[str]) -> None:
    cases = {c.id: c for c in build_cases()}
    try:
        what, case = argv[0], cases[argv[1]]
        inst, objective = case.inst, case.objective
        scale = TimeScale.choose(inst)
        floor = int(round(analytic_bound(inst, objective) * scale.time))
        if what == "pairs" and len(argv) in (4, 5):
            base, seconds = _devices(argv[2], inst.devices), _seconds(argv[3])
            if len(argv) == 5:
                floor = int(round(float(argv[4]) * scale.time))
            runs = [(base + [k], seconds) for k in range(inst.devices) if k not in base]
        elif what == "grow" and len(argv) == 5:
            runs = [(_devices(argv[2], inst.devices), _seconds(argv[3]))]
            steps = int(argv[4])
        elif what == "keep" and len(argv) >= 5:
            devices = _devices(argv[2], inst.devices)
            relax, keep = _seconds(argv[3]), _seconds(argv[4])
            kept = [_devices(a, inst.devices) for a in argv[5:]] or [devices]
            if not all(set(k) <= set(devices) for k in kept):
                raise ValueError("each KEPT set must be within DEVICES")
        else:
            raise ValueError("unknown probe or wrong number of arguments")
    except (IndexError, KeyError, ValueError) as err:
        sys.exit(f"{USAGE}: {err}")
    unit = scale.time
    if what == "keep":
        _keep(case.id, inst, objective, scale, floor, devices, relax, keep, kept)
        return
    t0 = time.perf_counter()
    for k in range(steps if what == "grow" else len(runs)):
        devs, seconds = runs[0] if what == "grow" else runs[k]
        r = relaxation.relax_device(inst, objective, devs[0], seconds, scale=scale,
                                    also=tuple(devs[1:]), lower_bound=floor)
        best = "none" if r.value is None else f"{r.value / unit:g}"
        print(f"{case.id} {'+'.join(map(str, devs))}: bound {r.bound / unit:g} best {best} "
              f"{'P' if r.proven else '-'} {r.seconds:.1f} s (in all {time.perf_counter() - t0:.1f}"
              f" s) overload {[(d, o / unit) for d, o in r.overload[:4]]}", flush=True)
        if what == "grow":
            floor = max(floor, r.bound)
            mates = [d for d, o in r.overload if o > 0]
            if not mates:
                break
            runs = [(devs + [mates[0]], seconds)]


def _keep(name, inst, objective, scale, floor, devices, relax, keep, kept) -> None:
    pm = projected.build(inst, objective, tuple(devices), scale=scale, lower_bound=floor)
    if pm is None:
        sys.exit(f"{USAGE}: the projection does not apply to {name}")
    solver = new_solver(relax, workers=2, seed=0, extra=EXACT_MODEL_PARAMS)
    code = solver.solve(pm.model)
    if solver.status_name(code) not in ("OPTIMAL", "FEASIBLE"):
        sys.exit(f"{name}: the relaxation found no schedule in {relax:g} s")
    starts = pm.complete({op: solver.value(v) for op, v in pm.start.items()})
    print(f"{name} {'+'.join(map(str, devices))} relaxed: {solver.status_name(code)}, bound "
          f"{solver.best_objective_bound / scale.time:g}, best "
          f"{solver.objective_value / scale.time:g}, {solver.wall_time:.1f} s", flush=True)
    for devs in kept:
        orders = [sorted(pm.graph.device_ops(d), key=lambda op: (starts[op], op)) for d in devs]
        sm = build_model(inst, objective, scale=scale, order=orders, lower_bound=floor)
        run = new_solver(keep, workers=2, seed=0, extra=EXACT_MODEL_PARAMS)
        status = run.status_name(run.solve(sm.model))
        found = "none"
        if status in ("OPTIMAL", "FEASIBLE"):
            sim = simulate(inst, Schedule(sm.entries(run), name="kept"))
            found = f"{sim.value(objective):g} ({'valid' if sim.feasible else 'INVALID'})"
        print(f"  order of {'+'.join(map(str, devs))} kept: {status}, {found}, "
              f"{run.wall_time:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
