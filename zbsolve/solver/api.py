"""``solve(inst, options)``: the optimizer's front door.

Order of work: reject impossible memory limits; evaluate every hand-made schedule with the
simulator and take the best one that fits as the incumbent (hint and upper bound); run CP-SAT
(or the large-instance method); turn its answer into per-device orders, re-simulate, and keep
whichever of (solver, incumbent) the simulator scores better. So the result is never worse than
its hint, and every figure reported is the simulator's.

The ``span`` objective is the longest per-device span (first op to last op of a device) with
every device starting its first op as early as the DAG allows, which is what the ASAP simulator
measures for orders in microbatch order; the model pins each device's first start to that time
so the solver's value and the simulator's agree.

Contract for ``method="large"`` (``zbsolve.solver.large``): a function
``solve_large(inst, options, hints: list[Schedule]) -> tuple[Schedule | None, float | None]``
returning its best schedule (any valid orders; re-simulated here) and a lower bound in instance
time units if it proved one (else None). ``options.time_limit`` is the time left.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Kind, Op, Pair
from zbsolve.schedule import Schedule, split_backward
from zbsolve.simulate import ScheduleError, SimResult, simulate, validate
from zbsolve.solver.bounds import (
    analytic_bound,
    check_memory,
    first_head,
    heads_tails,
    serial_schedule,
)
from zbsolve.solver.model import (
    MEMORY_MODELS,
    OBJECTIVES,
    TimeScale,
    build_model,
    microbatch_relabelling,
    scaled_instance,
)
from zbsolve.solver.progress import Progress, rel_gap

METHODS = ("auto", "exact", "large")
PAIRED_CANDIDATES, PAIRING_SECONDS = 2, 1.0  # overlap instances: candidates given F&B pairs
EXACT_MAX_OPS = 2500  # auto: above this many ops the monolithic model stalls on 2 cores
TOL = 1e-9


@dataclass
class SolveOptions:
    time_limit: float = 60.0  # seconds, wall, for the whole solve (baselines included)
    gap: float = 0.0  # relative gap at which to stop (CP-SAT relative_gap_limit)
    workers: int = 2
    seed: int = 0
    objective: str = "makespan"  # or "span" (longest per-device span: the ZB papers' metric)
    method: str = "auto"  # auto | exact | large
    progress: bool = False  # elapsed / incumbent / bound / gap lines on stderr
    memory_model: str = "cumulative"  # or "reservoir"
    symmetry: bool = True
    deterministic_time: float | None = None  # CP-SAT deterministic limit (reproducible runs)

    def check(self) -> None:
        """Reject bad options with the field name and the allowed values."""
        if not (isinstance(self.time_limit, (int, float)) and self.time_limit >= 0):
            raise ValueError(f"time_limit: expected seconds >= 0, got {self.time_limit!r}")
        if not 0 <= self.gap < 1:
            raise ValueError(f"gap: expected a relative gap in [0, 1), got {self.gap!r}")
        if not (isinstance(self.workers, int) and self.workers >= 1):
            raise ValueError(f"workers: expected an integer >= 1, got {self.workers!r}")
        for name, allowed in (("objective", OBJECTIVES), ("method", METHODS),
                              ("memory_model", MEMORY_MODELS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {getattr(self, name)!r}")


@dataclass
class SolveResult:
    schedule: Schedule  # meta filled: status, figures, bounds, baseline, options
    sim: SimResult  # the simulator's verdict on ``schedule`` (figures come from here)
    status: str  # optimal | feasible | fallback
    objective_value: float  # simulator's makespan or max span
    lower_bound: float  # max(analytic, cp-sat bound)
    analytic_bound: float
    cpsat_bound: float | None
    gap: float  # (objective_value - lower_bound) / objective_value
    solve_time: float
    baseline: str | None  # best feasible hand-made schedule used as hint
    baseline_value: float | None
    baselines: list = field(default_factory=list)  # every BaselineResult, for tables
    history: list[tuple[float, float, float]] = field(default_factory=list)


def hand_made(inst: Instance) -> list:
    """Every registered hand-made schedule, simulated.

    A generator that produces an invalid schedule is listed as not applicable with the reason,
    instead of taking the solver down with it.
    """
    from zbsolve.baselines import NAMES, BaselineResult, evaluate_all

    out = []
    for name in NAMES:
        try:
            out += evaluate_all(inst, (name,))
        except ScheduleError as exc:
            out.append(BaselineResult(name, None, None, f"invalid schedule: {exc}"))
    return out


@dataclass
class _Candidate:
    name: str
    schedule: Schedule
    sim: SimResult


def _greedy(inst: Instance, objective: str) -> tuple[Schedule, SimResult] | None:
    """The memory-aware greedy list scheduler: it covers placements and budgets no hand-made
    family does."""
    from zbsolve.solver.heuristic import heuristic_schedule

    sched, sim = heuristic_schedule(inst, objective, time_limit=1.0)  # memory checked by solve()
    return (sched, sim) if sim.feasible else None


def _candidates(inst: Instance, objective: str, hints: list[Schedule], baselines: list
                ) -> list[_Candidate]:
    """Every memory-feasible starting point, best first: hand-made, their I/W-split forms,
    caller hints, and the serial schedule as the witness that always fits."""
    out: list[_Candidate] = []
    for r in baselines:
        if r.applicable and r.result.feasible:
            out.append(_Candidate(r.name, r.schedule, r.result))
    for sched in [*hints, *(split_backward(c.schedule) for c in list(out))]:
        sim = simulate(inst, sched)
        if sim.feasible:
            out.append(_Candidate(sched.name, sched, sim))
    greedy = _greedy(inst, objective)
    if greedy is not None:
        out.append(_Candidate(greedy[0].name, greedy[0], greedy[1]))
    serial = serial_schedule(inst)
    out.append(_Candidate(serial.name, serial, simulate(inst, serial)))
    out.sort(key=lambda c: (c.sim.value(objective), c.sim.makespan, c.sim.max_span))
    if inst.overlap is not None:  # the best few, with overlapped pairs where they help
        from zbsolve.solver.pairing import pair_up

        for c in [c for c in out if not c.schedule.has_pairs][:PAIRED_CANDIDATES]:
            sched, sim = pair_up(inst, c.schedule, time_limit=PAIRING_SECONDS)
            if sched.has_pairs:
                out.append(_Candidate(sched.name, sched, sim))
        out.sort(key=lambda c: (c.sim.value(objective), c.sim.makespan, c.sim.max_span))
    return out


def solve(inst: Instance, options: SolveOptions | None = None,
          hints: list[Schedule] | tuple[Schedule, ...] = ()) -> SolveResult:
    """Optimize a schedule for ``inst`` (see the module docstring); never worse than a hint."""
    from zbsolve.baselines import best_feasible

    options = options or SolveOptions()
    options.check()
    t0 = time.perf_counter()
    check_memory(inst)
    objective = options.objective
    analytic = analytic_bound(inst, objective)
    baselines = hand_made(inst)
    best_hand = best_feasible(inst, objective, baselines)
    cands = _candidates(inst, objective, list(hints), baselines)
    inc = cands[0]
    progress = Progress(1.0, objective, echo=options.progress, floor=analytic)
    progress.note(inc.sim.value(objective), analytic, f"hint: {inc.name}")

    n_ops = TaskGraph(inst).count()
    method = options.method
    if method == "auto":
        method = "exact" if n_ops <= EXACT_MAX_OPS else "large"
    info: dict[str, Any] = {"method": method, "ops": n_ops}
    found: Schedule | None = None
    cp_bound: float | None = None
    remaining = options.time_limit - (time.perf_counter() - t0)
    proven = rel_gap(inc.sim.value(objective), analytic) <= TOL
    if proven:
        info["note"] = "the hint meets the analytic lower bound: optimal, solver not run"
    elif remaining <= 0:
        info["note"] = "no time left after the hand-made schedules; solver not run"
    elif method == "large":
        from zbsolve.solver.large import solve_large

        sub = dataclasses.replace(options, time_limit=remaining)
        found, cp_bound = solve_large(inst, sub, [c.schedule for c in cands[:3]])
        info["large"] = found.meta.get("large") if found is not None else None
    else:
        found, cp_bound = _solve_exact(inst, options, inc, remaining, progress, info)

    chosen, source = inc, f"hint:{inc.name}"
    if found is not None:
        sim = validate(inst, found)
        if sim.value(objective) <= inc.sim.value(objective) + TOL:
            chosen, source = _Candidate(found.name, found, sim), method
    value = chosen.sim.value(objective)
    lower = min(max(analytic, cp_bound if cp_bound is not None else -math.inf), value)
    gap = rel_gap(value, lower)
    if gap <= TOL and (found is not None or proven):
        status = "optimal"
    else:
        status = "fallback" if found is None else "feasible"
    elapsed = time.perf_counter() - t0
    progress.note(value, lower, f"{status} ({source})")

    sched = Schedule([list(r) for r in chosen.schedule.orders], name=f"zbsolve-{objective}",
                     starts=dict(chosen.sim.start))
    base_value = best_hand.result.value(objective) if best_hand else None
    sched.meta = {
        "instance": inst.to_dict(),  # so exports of this file need no --instance
        "status": status,
        "source": source,
        "objective": objective,
        "objective_value": value,
        "figures": chosen.sim.summary(),
        "bounds": {"lower": lower, "analytic": analytic, "cpsat": cp_bound, "gap": gap},
        "solve_time": elapsed,
        "baseline": None if best_hand is None else {
            "name": best_hand.name, "value": base_value, "figures": best_hand.result.summary()},
        "options": asdict(options),
        "solver": info,
    }
    return SolveResult(
        schedule=sched, sim=chosen.sim, status=status, objective_value=value,
        lower_bound=lower, analytic_bound=analytic, cpsat_bound=cp_bound, gap=gap,
        solve_time=elapsed, baseline=best_hand.name if best_hand else None,
        baseline_value=base_value, baselines=baselines, history=progress.history,
    )


def hint_sim_orders(inst: Instance, starts: dict[Op, float]) -> list[list[Op]]:
    """Ops of each device (any order) under the given starts."""
    graph = TaskGraph(inst)
    rows: list[list[Op]] = [[] for _ in range(inst.devices)]
    for op in starts:
        d = graph.device(op)
        if d is not None:
            rows[d].append(op)
    return rows


def _step_slack(si: Instance) -> int:
    """How far past every device's end the step's implicit jobs may end (model units): a span
    leaves them out (post-validation's check chain), so the span horizon makes room for their
    longest chain. 0 without the step's jobs (the model stays as it was)."""
    graph = TaskGraph(si)
    if not graph.has_step:
        return 0
    implicit = list(graph.implicit_ops())
    return int(sum(graph.duration(op) for op in implicit) + si.comm * len(implicit))


def _solve_exact(inst: Instance, options: SolveOptions, inc: _Candidate, remaining: float,
                 progress: Progress, info: dict[str, Any]) -> tuple[Schedule | None, float | None]:
    """One monolithic CP-SAT run hinted with the incumbent; returns (schedule, valid bound)."""
    from ortools.sat.python import cp_model

    scale = TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    hint_sched = split_backward(inc.schedule)
    hint_sim = simulate(si, hint_sched)  # integer start times
    starts, pairs = _model_hint(hint_sched, hint_sim, options.symmetry)
    # The makespan of an ASAP-timed feasible order is attainable in the model, so it is a safe
    # upper bound (and horizon). For span only if the hint starts every device at its head (the
    # model pins that); then every op ends by max(head of a first op) + span.
    ub, horizon = None, None
    if hint_sim.feasible and options.objective == "makespan":
        ub = int(round(hint_sim.makespan))
    elif hint_sim.feasible:
        ht = heads_tails(si, ordered=False)
        h0 = [first_head(si, ht, d) for d in range(si.devices)]
        firsts = [min(starts[op] for op in row) for row in hint_sim_orders(si, starts)]
        if all(abs(a - b) < 0.5 for a, b in zip(firsts, h0)):
            ub = int(round(hint_sim.max_span))
            horizon = int(max(h0)) + ub + _step_slack(si)
    sm = build_model(inst, options.objective, upper_bound=ub, horizon=horizon,
                     memory_model=options.memory_model, symmetry=options.symmetry, scale=scale)
    sm.add_hint({k: int(round(v)) for k, v in starts.items()}, pairs)
    info.update(scale=asdict(scale), model=sm.stats)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(remaining, 1e-3)
    prm.num_workers = options.workers
    prm.random_seed = options.seed
    prm.relative_gap_limit = options.gap
    if options.deterministic_time is not None:
        prm.max_deterministic_time = options.deterministic_time
    progress.unit = float(scale.time)
    solver.best_bound_callback = progress.on_bound
    code = solver.solve(sm.model, progress)
    info.update(cp_status=solver.status_name(code), cp_wall=solver.wall_time)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None
    # Rounded durations are at most (1 + time_error) times the true ones, so the rounded
    # optimum is at most (1 + time_error) times the true optimum: divide the bound by it.
    bound = None
    if scale.memory_exact:
        bound = solver.best_objective_bound / scale.time / (1.0 + scale.time_error)
    info["cp_objective"] = solver.objective_value / scale.time
    return Schedule(sm.entries(solver), name=f"cpsat-{options.objective}"), bound


def _model_hint(sched: Schedule, sim: SimResult, symmetry: bool
                ) -> tuple[dict[Op, float], list[Pair]]:
    """The incumbent as the model sees it: every op's start in the split form (a pair's fused
    B becomes its I and W, both at the pair's start), and its pairs; relabelled into
    microbatch order when the model breaks that symmetry."""
    starts = dict(sim.start)
    pairs = [e for row in sched.orders for e in row if isinstance(e, Pair)]
    for pair in pairs:
        if pair.second.kind == Kind.B:
            t = starts.pop(pair.second)
            starts[pair.second._replace(kind=Kind.I)] = starts[pair.second._replace(kind=Kind.W)] = t
    if not symmetry:
        return starts, pairs
    relabel = microbatch_relabelling(starts)
    starts = {relabel[op]: t for op, t in starts.items()}

    def moved(op: Op) -> Op:
        if op.kind == Kind.B:
            return relabel[op._replace(kind=Kind.I)]._replace(kind=Kind.B)
        return relabel[op]

    return starts, [Pair(moved(p.first), moved(p.second)) for p in pairs]
