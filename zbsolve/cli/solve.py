"""``zbsolve solve INSTANCE -o schedule.json``: optimize, write the schedule, compare.

The written schedule carries per-device orders, the simulator's start times and the metadata
(status, figures, bounds, gap, solve time, best hand-made schedule). The table printed puts the
solver's schedule next to every hand-made one, all judged by the simulator.

``--time-limit`` bounds the whole command from the moment the handler starts: loading the
instance, the solve, and writing the schedule. The solve gets what is left after loading minus a
reserve for the write (``write_reserve``). Python's start-up and imports before the handler are
not counted, and a schedule must have been simulated once to be returned at all (measured in
docs/solver.md). With ``--deterministic`` the limit is CP-SAT's deterministic time instead and
the command returns the same schedule on any machine.
"""

from __future__ import annotations

import time

from zbsolve.cli import args as types
from zbsolve.cli.common import (
    add_json,
    as_run_on,
    fmt_list,
    instance_arg,
    load,
    print_json,
    print_schedule_table,
    step_arg,
    with_step,
)
from zbsolve.instance import memory_unit_label


def register(sub) -> None:
    parser = sub.add_parser("solve", help="optimize a schedule with CP-SAT and compare",
                            description="Optimize a schedule with CP-SAT and compare it with "
                            "every hand-made schedule, all judged by the simulator.")
    instance_arg(parser)
    parser.add_argument("-o", "--output",
                        help="where to write the schedule JSON (default: not written)")
    parser.add_argument("--time-limit", type=types.seconds, default=60.0, metavar="SECONDS",
                        help="seconds for the whole command, wall clock (default: 60); with "
                             "--deterministic, CP-SAT deterministic seconds")
    parser.add_argument("--deterministic", action="store_true",
                        help="measure the limit in CP-SAT's deterministic time and cut nothing "
                             "by the clock: the same command gives the same schedule anywhere")
    parser.add_argument("--no-memory-tiebreak", action="store_true",
                        help="skip the second phase that keeps the step time and minimizes memory")
    parser.add_argument("--relax", action="store_true",
                        help="devices with several stages: if the gap is above 1%% at 40%% of the "
                             "limit, solve one-device relaxations for a stronger bound and the "
                             "bottleneck's order (docs/solver.md)")
    parser.add_argument("--bound-search", action="store_true",
                        help="exact method: CP-SAT's full-problem worker searches the lower bound "
                             "(lb_tree_search) instead of schedules; proves small memory-tight V "
                             "instances the default does not, searches worse on others "
                             "(docs/solver.md)")
    parser.add_argument("--no-bound-switch", action="store_true",
                        help="exact method, devices with several stages, <= 800 ops: do not hand "
                             "the search to the bound search when, at 1/4 of the limit, its bound "
                             "is still the analytic one and it has found nothing better than its "
                             "hint (docs/solver.md)")
    parser.add_argument("--no-relax-first", action="store_true",
                        help="devices with several stages and limits, <= 800 ops: skip the "
                             "one-device relaxations (1 s each, 1/10 of the limit in all) that "
                             "raise the bound before the search (docs/solver.md)")
    parser.add_argument("--no-shave", action="store_true",
                        help="the relaxations first: skip their second slice with CP-SAT's "
                             "shaving search (objective_lb_search) for those not proven in the "
                             "first (docs/solver.md)")
    parser.add_argument("--no-relax-rest", action="store_true",
                        help="the relaxations first: do not give what is left of their share "
                             "to the open relaxation with the longest relaxed schedule "
                             "(docs/solver.md)")
    parser.add_argument("--no-unpaired-first", action="store_true",
                        help="overlap instances: do not solve the instance without pairs first "
                             "(1/4 of the limit) for the search's start (docs/solver.md)")
    parser.add_argument("--no-bottleneck-first", action="store_true",
                        help="the relaxations first: where they lift the bound, do not run "
                             "the whole model with the top device's relaxed order kept before "
                             "the search (1/20 of the limit; docs/solver.md)")
    parser.add_argument("--no-state-bound", action="store_true",
                        help="V placements with limits: skip the bound that branches on the "
                             "memory state at the tip's last forward (up to 3/10 of the limit, "
                             "before the search; docs/solver.md)")
    parser.add_argument("--no-windows", action="store_true",
                        help="devices with several stages: skip the window search that runs "
                             "before CP-SAT for 1/6 of the limit (docs/solver.md)")
    parser.add_argument("--no-handover", action="store_true",
                        help="large method, devices with several stages: keep the window "
                             "search for the whole limit instead of handing the time left to "
                             "the whole model after a pass that accepts nothing "
                             "(docs/solver.md)")
    parser.add_argument("--no-stretch", action="store_true",
                        help="devices with several stages and many microbatches: skip "
                             "solving the model with fewer microbatches (up to 1/2 of the "
                             "limit) and repeating its steady state (docs/solver.md)")
    parser.add_argument("--start", metavar="SCHEDULE",
                        help="a schedule to start from (an earlier solve, an executor table, a "
                             "torch pipelining CSV): judged on INSTANCE, and the answer is never "
                             "worse than it (default: none; the hand-made schedules and the "
                             "greedy only)")
    parser.add_argument("--gap", type=types.nonneg_number, default=0.0,
                        help="stop at this relative gap to the lower bound, without the memory "
                             "tie-break once it is met (default: 0, prove optimal)")
    parser.add_argument("--workers", type=types.positive_int, default=2, help="CP-SAT workers")
    parser.add_argument("--seed", type=types.seed, default=0, help="CP-SAT random seed (default: 0)")
    parser.add_argument("--objective", choices=("makespan", "span"), default="makespan",
                        help="makespan, or span = longest per-device span (the ZB papers')")
    parser.add_argument("--method", choices=("auto", "exact", "large"), default="auto",
                        help="exact: one CP-SAT model; large: window search for big instances "
                             "(docs/scale.md); auto: by size")
    parser.add_argument("--memory-model", choices=("cumulative", "reservoir"),
                        default="cumulative",
                        help="how CP-SAT states the memory limit (same schedules; docs/solver.md)")
    parser.add_argument("--memory-margin", type=types.margin_fraction, default=0.0,
                        metavar="FRACTION",
                        help="keep this share of every device's memory limit free: solve with "
                             "limit * (1 - FRACTION) (default: 0)")
    step_arg(parser, "optimize the step's end")
    parser.add_argument("--no-symmetry", action="store_true",
                        help="do not impose microbatch order per (kind, stage)")
    parser.add_argument("--progress", action="store_true",
                        help="print elapsed / incumbent / bound / gap on stderr")
    parser.add_argument("--fused-backward", action="store_true",
                        help="every backward one B, for runtimes without the I/W split "
                             "(Megatron, torch's Schedule1F1B-style runtimes)")
    add_json(parser)
    parser.set_defaults(handler=handle)


def comparison(result) -> list[dict]:
    """Solver row first, then every hand-made schedule (applicable or not)."""
    rows = [{"name": "zbsolve", "status": result.status, **result.sim.summary()}]
    for r in result.baselines:
        if r.applicable:
            rows.append({"name": r.name, "status": "hand-made", **r.result.summary()})
        else:
            rows.append({"name": r.name, "status": "n/a", "reason": r.reason})
    return rows


WRITE_FIXED = 0.05  # seconds: the reserve for checking and writing, fixed part ...
WRITE_PER_OP = 1e-5  # ... and per op (the JSON of orders and starts), measured in docs/solver.md


def write_reserve(n_ops: int, output: str | None) -> float:
    """Seconds kept back from the solve for re-simulating and writing the schedule."""
    return WRITE_FIXED + (WRITE_PER_OP * n_ops if output else 0.0)


def handle(args) -> int:
    from zbsolve.graph import TaskGraph
    from zbsolve.io import check_output
    from zbsolve.simulate import validate
    from zbsolve.solver import SolveOptions, solve
    from zbsolve.solver.fused import solve_fused

    t0 = time.perf_counter()
    if args.output:  # found now, not after the solve
        check_output(args.output, inputs=[args.instance], suffixes=(".json",))
    given = with_step(load(args.instance), args)
    inst = given.with_memory_margin(args.memory_margin) if args.memory_margin else given
    start = read_start(args.start, inst, args.fused_backward) if args.start else None
    limit = args.time_limit
    if not args.deterministic:  # the solve gets what loading and writing leave of the budget
        spent = time.perf_counter() - t0
        limit = max(0.0, limit - spent - write_reserve(TaskGraph(inst).count(), args.output))
    options = SolveOptions(
        time_limit=limit, gap=args.gap, workers=args.workers, seed=args.seed,
        objective=args.objective, method=args.method, progress=args.progress,
        memory_model=args.memory_model, symmetry=not args.no_symmetry,
        deterministic=args.deterministic, memory_tiebreak=not args.no_memory_tiebreak,
        relax=args.relax, relax_first=not args.no_relax_first, windows=not args.no_windows,
        stretch=not args.no_stretch, handover=not args.no_handover,
        bound_search=args.bound_search, bound_switch=not args.no_bound_switch,
        state_bound=not args.no_state_bound, shave=not args.no_shave,
        relax_rest=not args.no_relax_rest, bottleneck_first=not args.no_bottleneck_first,
        unpaired_first=not args.no_unpaired_first,
    )
    hints = [start[0]] if start else []
    result = (solve_fused if args.fused_backward else solve)(inst, options, hints)
    sched = result.schedule
    margin = margin_meta(given, inst, args.memory_margin)
    if margin:
        sched.meta["memory_margin"] = margin
    if args.output:
        # solve() returns the simulator's verdict on exactly these orders (result.sim): the
        # check before writing, without a second pass that would cost the budget
        if not result.sim.feasible or result.sim.start != sched.starts:
            validate(inst, sched)
        sched.dump(args.output)  # atomic: a full disk leaves the old file, not a cut one
    wall = time.perf_counter() - t0
    table = comparison(result)
    begun = start_meta(start, options.objective)
    meta = sched.meta
    if args.json:
        print_json({"output": args.output, "status": result.status,
                    "objective": options.objective, "objective_value": result.objective_value,
                    "lower_bound": result.lower_bound, "analytic_bound": result.analytic_bound,
                    "relaxed_bound": result.relaxed_bound,
                    "cpsat_bound": result.cpsat_bound, "gap": result.gap,
                    "solve_time": result.solve_time, "command_time": wall,
                    "time_limit": args.time_limit, "deterministic": args.deterministic,
                    "baseline": result.baseline,
                    "baseline_value": result.baseline_value, "source": meta["source"],
                    "memory_unit": inst.memory_unit, "memory_margin": margin or None,
                    "step": inst.step.mode,
                    "fused_backward": args.fused_backward,
                    "start": begun,
                    "schedules": table})
        return 0
    _print_table(inst, result, table, args.output, margin)
    if begun:
        print(f"started from {args.start} ({begun['name']}, {options.objective} "
              f"{begun['value']:.6g}); the answer is never worse than it")
    return 0


def read_start(path: str, inst, fused: bool):
    """``--start``: the schedule file's compute order, judged on ``inst`` by the simulator.

    A start is a hint the solve can only improve on (its pool keeps the best schedule of every
    phase), so an earlier answer given back with a longer limit is never lost, and a hand-made
    or torch order the user already runs is a floor. It must be a valid order of ``inst`` that
    fits its memory: one that does not is refused here, with the reason, before any work."""
    from zbsolve.export.judge import read_schedule_file
    from zbsolve.simulate import ScheduleError, simulate
    from zbsolve.solver.fused import only_fused

    sched = as_run_on(read_schedule_file(path, inst), inst).schedule
    if fused and not only_fused(sched):
        raise ValueError(f"--start {path}: has split backwards (I, W); --fused-backward needs "
                         "every backward one B: give a fused schedule or drop --fused-backward")
    try:
        sim = simulate(inst, sched)
    except ScheduleError as exc:
        raise ValueError(f"--start {path}: not a schedule of {inst.name}: {exc}") from None
    if not sim.feasible:
        raise ValueError(f"--start {path}: exceeds the memory limit of {inst.name}: "
                         f"{sim.violations[0]}; a start must fit (see zbsolve check)")
    return sched, sim


def start_meta(start, objective: str) -> dict | None:
    """The ``--start`` schedule's name and value, for the JSON answer (None without one)."""
    if start is None:
        return None
    sched, sim = start
    return {"name": sched.name, "value": sim.value(objective)}


def margin_meta(given, solved, margin: float) -> dict:
    """What ``--memory-margin`` did, for the schedule's meta and the JSON answer ({} if 0)."""
    if not margin:
        return {}
    return {"fraction": margin, "limit_given": list(given.limit),
            "limit_solved": list(solved.limit)}


def _print_table(inst, result, table: list[dict], output: str | None, margin: dict) -> None:
    obj = result.schedule.meta["objective"]
    unit = f" {memory_unit_label(inst)}" if memory_unit_label(inst) else ""
    kept = (f" (memory margin {margin['fraction']:g}: given {fmt_list(margin['limit_given'])})"
            if margin else "")
    step = f" step={inst.step.mode}" if inst.step.active else ""
    print(f"{inst.name}: p={inst.p} m={inst.m} v={inst.v} placement={inst.placement_kind} "
          f"comm={inst.comm:g} limit={fmt_list(list(inst.limit))}{unit}{kept}{step}")
    base = "none fits the memory limit"
    if result.baseline:
        hand = result.schedule.meta["baseline"]["figures"]["peak_memory"]
        base = (f"{result.baseline} {result.baseline_value:.6g} (peak {fmt_list(hand)}; the "
                "least memory among the fastest that fit)")
    relaxed = "" if result.relaxed_bound is None else f"relaxed {result.relaxed_bound:.6g}, "
    print(f"status {result.status}: {obj} {result.objective_value:.6g}, lower bound "
          f"{result.lower_bound:.6g} (analytic {result.analytic_bound:.6g}, {relaxed}cp-sat "
          f"{'-' if result.cpsat_bound is None else f'{result.cpsat_bound:.6g}'}), gap "
          f"{100 * result.gap:.3f}%, {result.solve_time:.2f}s; best hand-made: {base}")
    print_schedule_table(table, memory_unit_label(inst))
    if output:
        print(f"schedule written to {output}")
