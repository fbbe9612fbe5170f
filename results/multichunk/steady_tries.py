"""Two other ways to a steady state, tried and dropped (issue 18, tenth pass; docs/solver.md,
"Stretching").

    python results/multichunk/steady_tries.py timed vhalf/p8-m32 16 60 vhalf/p8-m32
    python results/multichunk/steady_tries.py periodic vhalf/p8-m32 12 12 60
    python results/multichunk/steady_tries.py shrink vhalf/p16-m64 2

``timed``: solve CASE with M' microbatches for SECONDS, then for every cut microbatch c and
period tau (the busiest device's work per microbatch, + 0, 0.5, 1, 2) give each op of TARGET an
extrapolated start (the reduced schedule's for microbatches before c, c's plus tau per
microbatch after it, the reduced schedule's shifted by (m - m') tau beyond), sort each device's
ops by it, optionally put the W's back with ``stretch.refill_weight_grads``, and simulate with
the memory limit. Prints the best and why the others were refused.

``periodic``: the full exact model of CASE with start(k, s, j + 1) = start(k, s, j) + tau for
every microbatch j of the middle (A <= j, j + 1 < m - B), no hint, CP-SAT for SECONDS (2
workers, seed 0); prints CP-SAT's value and the simulator's value of its orders.

``shrink``: the greedy (``heuristic_schedule``, 30 s) on CASE with FACTOR x m microbatches, whose
steady state is longer, then every cut c: drop microbatches c .. c + (FACTOR - 1) m - 1 from each
device's order and renumber the rest; prints the best the simulator accepts against the greedy
on CASE itself (the stretch backwards: on V-Half p = 16 the greedy's overhead over the work falls
from 35 at m = 32 to 21 at m = 128).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from functools import partial

from ortools.sat.python import cp_model

from zbsolve.bench import Case, build_cases, machine_note
from zbsolve.instance import Instance
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, simulate, validate
from zbsolve.solver.api import SolveOptions, solve
from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver
from zbsolve.solver.heuristic import heuristic_schedule
from zbsolve.solver.model import TimeScale, build_model
from zbsolve.solver.stretch import reduced, refill_weight_grads

USAGE = ("usage: steady_tries.py timed CASE M' SECONDS TARGET... | "
         "steady_tries.py periodic CASE A B SECONDS | steady_tries.py shrink CASE FACTOR...")


def timed_stretch(inst: Instance, small_inst: Instance, small: Schedule, cut: int,
                  tau: float) -> Schedule:
    """Each device's ops of ``inst`` sorted by their extrapolated start (module docstring)."""
    sim = simulate(small_inst, small)
    delta = inst.microbatches - small_inst.microbatches
    rows = []
    for row in small.orders:
        starts: dict[tuple[str, int], dict[int, float]] = {}
        proto = {}
        for op in row:
            starts.setdefault((op.kind, op.stage), {})[op.mb] = sim.start[op]
            proto.setdefault((op.kind, op.stage), op)
        keyed = []
        for cls, t in starts.items():
            for j in range(inst.microbatches):
                at = (t[j] if j < cut else t[cut] + (j - cut) * tau if j <= cut + delta
                      else t[j - delta] + delta * tau)
                keyed.append((at, j, proto[cls]._replace(mb=j)))
        rows.append([op for _, _, op in sorted(keyed)])
    return Schedule(rows, name=f"timed-c{cut}-t{tau:g}")


def timed(case_id: str, m_small: int, seconds: float, targets: list[str],
          cases: dict[str, Case]) -> None:
    case = cases[case_id]
    small_inst = reduced(case.inst, m_small)
    small = solve(small_inst, SolveOptions(time_limit=seconds, workers=2, seed=0,
                                           objective=case.objective))
    print(f"{case_id} with m' = {m_small}: {small.status} {small.objective_value:g} / "
          f"{small.lower_bound:g}", flush=True)
    work = max(small_inst.device_work(d) for d in range(small_inst.devices)) / m_small
    for target in targets:
        inst, best, refused = cases[target].inst, None, Counter()
        for tau in (work, work + 0.5, work + 1, work + 2):
            for cut in range(m_small):
                sched = timed_stretch(inst, small_inst, small.schedule, cut, tau)
                bare = [[op for op in row if op.kind != "W"] for row in sched.orders]
                refilled = refill_weight_grads(inst, bare)
                for cand in (sched, None if refilled is None else Schedule(refilled)):
                    if cand is None:
                        refused["deadlock"] += 1
                        continue
                    try:
                        value = validate(inst, cand).value(case.objective)
                    except ScheduleError as e:
                        refused[str(e).split(":")[0]] += 1
                        continue
                    if best is None or value < best[0]:
                        best = (value, cut, tau)
        print(f"  {target}: best {best} (value, cut, tau); refused: {dict(refused)}",
              flush=True)


def periodic(case_id: str, a: int, b: int, seconds: float, cases: dict[str, Case]) -> None:
    inst = cases[case_id].inst
    m, scale = inst.microbatches, TimeScale.choose(inst)
    sm = build_model(inst, "span", scale=scale)
    tau = max(round(scale.t(inst.device_work(d)) / m) for d in range(inst.devices))
    tied = 0
    for op, var in sm.start.items():
        nxt = op._replace(mb=op.mb + 1)
        if a <= op.mb and op.mb + 1 < m - b and nxt in sm.start:
            sm.model.Add(sm.start[nxt] == var + tau)
            tied += 1
    solver = new_solver(seconds, workers=2, seed=0, extra=EXACT_MODEL_PARAMS)
    code = solver.solve(sm.model)
    found = code in (cp_model.FEASIBLE, cp_model.OPTIMAL)
    value = validate(inst, Schedule(sm.entries(solver))).value("span") if found else None
    print(f"{case_id}, {tied} equalities (tau = {tau} model units): "
          f"{solver.status_name(code)}, CP-SAT "
          f"{solver.objective_value / scale.time if found else None}, simulated {value}")


def shrink(case_id: str, factors: list[float], cases: dict[str, Case]) -> None:
    case = cases[case_id]
    inst, m = case.inst, case.inst.microbatches
    own = heuristic_schedule(inst, case.objective, time_limit=30)[1].value(case.objective)
    print(f"{case_id}: greedy {own:g}", flush=True)
    for factor in factors:
        big, sim = heuristic_schedule(reduced(inst, round(factor * m)), case.objective,
                                      time_limit=30)
        delta, best, refused = round(factor * m) - m, None, 0
        for cut in range(m + 1):
            rows = [[op if op.mb < cut else op._replace(mb=op.mb - delta)
                     for op in row if not cut <= op.mb < cut + delta] for row in big.orders]
            try:
                value = validate(inst, Schedule(rows)).value(case.objective)
            except ScheduleError:
                refused += 1
                continue
            best = value if best is None else min(best, value)
        print(f"  from m = {round(factor * m)} (greedy {sim.value(case.objective):g}): best "
              f"shrink {best}, {refused} refused", flush=True)


def main() -> None:
    args = sys.argv[1:]
    try:  # every argument is parsed here, so a bad one gives the usage line, not a traceback
        if args[0] == "timed" and len(args) >= 5:
            m_small, seconds = int(args[2]), float(args[3])
            ok = m_small >= 1 and seconds > 0
            what = partial(timed, args[1], m_small, seconds, args[4:])
            named = [args[1], *args[4:]]
        elif args[0] == "shrink" and len(args) >= 3:
            factors = [float(x) for x in args[2:]]
            ok = all(f > 1 for f in factors)
            what = partial(shrink, args[1], factors)
            named = [args[1]]
        elif args[0] == "periodic" and len(args) == 5:
            a, b, seconds = int(args[2]), int(args[3]), float(args[4])
            ok = a >= 0 and b >= 0 and seconds > 0
            what = partial(periodic, args[1], a, b, seconds)
            named = [args[1]]
        else:
            raise ValueError
        if not ok:
            sys.exit(f"{USAGE}: M' >= 1, SECONDS > 0, A and B >= 0, FACTOR > 1")
    except (IndexError, ValueError):
        sys.exit(USAGE)
    cases = {c.id: c for c in build_cases()}  # once: each mode takes its cases from here
    unknown = [k for k in named if k not in cases]
    if unknown:
        sys.exit(f"{USAGE}: unknown case {' '.join(unknown)} (see zbsolve bench --list)")
    print(f"# python results/multichunk/steady_tries.py {' '.join(args)}\n"
          f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine_note()}",
          flush=True)
    what(cases)  # the mode's own arguments were bound above; the cases come last


if __name__ == "__main__":
    main()
