"""The V's tip and ends as relaxations of a bench case, and the tip's order kept on the whole
model (issue 18, twenty-first pass).

On vmin/p16-m32 the one-device relaxation of the tip (device p-1, which holds stages p-1 and
p) proves more than any other device's (nineteenth pass: 239 against 234 for device 0 and the
analytic 231). This asks what the tip gives with the V's other end (device 0, which holds
the model's first and last stages), at m = 64, and whether the order of the tip's relaxed
optimum helps the search: it is kept on the whole model (``build_model(order=...)``) for
SECONDS, hinted with every other device's starts from a schedule file (``-`` for no hint).

Each relaxation is the solver's (``relaxation.relax_device``, ``also`` for a pair), 2 workers,
seed 0, no hint, no upper bound, the analytic bound passed as its floor; the case's own
objective (span for the V rows).

    python results/multichunk/tip_probe.py vmin/p16-m32 25 15 0,15
    python results/multichunk/tip_probe.py vmin/p16-m32 20 15 --keep 60 SCHEDULE.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from zbsolve.bench import build_cases
from zbsolve.schedule import Schedule, parse_schedule_dict
from zbsolve.simulate import simulate
from zbsolve.solver import relaxation
from zbsolve.solver.api import SolveOptions, _model_hint
from zbsolve.solver.bounds import analytic_bound
from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver
from zbsolve.solver.model import TimeScale, build_model, scaled_instance

USAGE = ("usage: tip_probe.py CASE SECONDS DEVICES... [--keep SECONDS SCHEDULE.json|-]"
         "  (DEVICES: 15 or 0,15 for a pair)")


def main(argv: list[str]) -> None:
    keep = None
    if "--keep" in argv:
        at = argv.index("--keep")
        keep, argv = argv[at + 1:at + 3], argv[:at]
        if len(keep) != 2:
            sys.exit(USAGE)
    if len(argv) < 3:
        sys.exit(USAGE)
    cases = {c.id: c for c in build_cases()}
    if argv[0] not in cases:
        sys.exit(f"{USAGE}: unknown case {argv[0]!r}")
    case = cases[argv[0]]
    inst, objective = case.inst, case.objective
    seconds = _seconds(argv[1])
    sets = [_devices(spec, inst.devices) for spec in argv[2:]]
    keep_seconds = None if keep is None else _seconds(keep[0])
    incumbent = None if keep is None or keep[1] == "-" else _schedule(keep[1], inst)
    scale = TimeScale.choose(inst)
    floor = int(round(analytic_bound(inst, objective) * scale.time))
    print(f"{case.id} ({objective}): analytic bound {floor / scale.time:g}", flush=True)
    last = None
    for spec, devices in zip(argv[2:], sets):
        last = r = relaxation.relax_device(inst, objective, devices[0], seconds, scale=scale,
                                           also=tuple(devices[1:]), lower_bound=floor)
        best = "none" if r.value is None else f"{r.value / scale.time:g}"
        print(f"devices {spec}: {'proven' if r.proven else 'open'}, bound "
              f"{r.bound / scale.time:g}, best {best}, {r.seconds:.1f} s", flush=True)
    if keep_seconds is None or last is None or not last.order:
        return
    sm = build_model(inst, objective, scale=scale, order=[list(last.order)],
                     lower_bound=last.bound)
    if incumbent is not None:
        hint = _model_hint(scaled_instance(inst, scale), incumbent,
                           SolveOptions(objective=objective))[0]
        sm.add_hint({op: t for op, t in hint.items() if op not in set(last.order)})
    solver = new_solver(keep_seconds, workers=2, seed=0, extra=EXACT_MODEL_PARAMS)
    code = solver.solve(sm.model)
    found = "none"
    if solver.status_name(code) in ("OPTIMAL", "FEASIBLE"):
        sim = simulate(inst, Schedule(sm.entries(solver), name="kept"))
        found = f"{sim.value(objective):g} (simulated, {'valid' if sim.feasible else 'INVALID'})"
    print(f"device {last.device}'s order kept, {'no hint' if incumbent is None else 'hinted'}: "
          f"{solver.status_name(code)}, best {found}, {solver.wall_time:.1f} s")


def _schedule(path: str, inst) -> Schedule:
    """The hint's schedule file, which the simulator must accept on the case's instance."""
    try:
        sched = parse_schedule_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        if not simulate(inst, sched).feasible:
            raise ValueError("over the memory limit of the case")
    except (OSError, ValueError) as err:
        sys.exit(f"{USAGE}: SCHEDULE.json {path!r}: {err}")
    return sched


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        sys.exit(f"{USAGE}: SECONDS must be a finite number above 0, got {text!r}")
    return seconds


def _devices(spec: str, count: int) -> list[int]:
    try:
        devices = [int(d) for d in spec.split(",")]
    except ValueError:
        devices = []
    if not devices or not all(0 <= d < count for d in devices) or len(set(devices)) < len(devices):
        sys.exit(f"{USAGE}: DEVICES must be distinct devices 0..{count - 1}, got {spec!r}")
    return devices


if __name__ == "__main__":
    main(sys.argv[1:])
