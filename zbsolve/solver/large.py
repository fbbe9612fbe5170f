"""Large instances: large-neighbourhood search with rolling time windows, started from the greedy.

Why this design (numbers in docs/scale.md): at p=32, m=256 (24,576 ops) building the monolithic
CP-SAT model alone takes ~5 s in Python and CP-SAT then stalls in presolve on 2 cores, while the
greedy (``zbsolve.solver.heuristic``) is already at or within a fraction of a percent of the lower
bound. What is left to gain is local: a warm-up that could hold one more forward, a cool-down whose
W's could be packed tighter, a memory-limited stretch where deferring W lets an extra F in. A
rolling window finds exactly those and is cheap, because the window model contains only the
window's ops:

* incumbent = per-device orders, timed by the simulator (ASAP);
* window = all ops whose incumbent start lies in [t0, t1): closed under predecessors, so every op
  before it stays where it is and fixes the window's release times (device free time, input
  arrival) and each device's memory level at the window's start;
* the window is re-solved by CP-SAT (intervals, precedences with comm, NoOverlap per device,
  a reservoir per device for memory, hinted with the incumbent so it starts feasible) to minimise
  the estimated objective (window end of each device + the incumbent's tail after it) and, second,
  the sum of the devices' window ends (pack left);
* the new orders (before + window re-ordered + after unchanged) are re-timed by the simulator and
  accepted only if the simulator says the objective is no worse and the devices finish earlier.
  Memory after the window is unchanged by construction (same set of ops in the window, and memory
  depends on the order only), and the simulator re-checks it anyway.

The window slides forward with 50% overlap; its size adapts (grow when CP-SAT proves windows
optimal fast, shrink when it times out). Everything runs on the integer-scaled instance of
``zbsolve.solver.model.TimeScale`` so CP-SAT and the simulator agree exactly; the result is
validated on the true instance before it is returned, and the start schedule is returned if the
search did not beat it there. Anytime: the best schedule so far is always at hand.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import ScheduleError, SimResult, device_lower_bounds, simulate, validate
from zbsolve.solver.heuristic import OBJECTIVES, heuristic_schedule

TOL = 1e-6


@dataclass
class LNSConfig:
    """Knobs of the window search (defaults measured on the ICLR and p=32 m=256 instances)."""

    window_ops: int = 600  # initial target number of ops per window (rounded to microbatches)
    max_ops: int = 3000
    window_time: float = 4.0  # CP-SAT seconds per window at most
    overlap: float = 0.5  # fraction of a window the next one shares
    workers: int = 2
    seed: int = 0


@dataclass
class LNSStats:
    windows: int = 0
    accepted: int = 0
    optimal_windows: int = 0
    passes: int = 0
    history: list[tuple[float, float, float]] = field(default_factory=list)  # elapsed, value, bound

    def as_dict(self) -> dict[str, Any]:
        return {"windows": self.windows, "accepted": self.accepted,
                "optimal_windows": self.optimal_windows, "passes": self.passes,
                "history": self.history}


def objective_value(sim: SimResult, objective: str) -> float:
    return sim.makespan if objective == "makespan" else sim.max_span


def quick_bound(inst: Instance, objective: str) -> float:
    """A cheap valid lower bound (the analytic one can take seconds at this size).

    span >= busy time of every device; makespan >= earliest first start + work of every device.
    """
    if objective == "span":
        return max(inst.device_work(d) for d in range(inst.devices))
    return max(device_lower_bounds(inst))


def _key(sim: SimResult, orders: list[list[Op]], objective: str) -> tuple[float, float]:
    """Objective, then the sum of the devices' finish times (lets the search walk plateaus)."""
    return objective_value(sim, objective), sum(sim.end[row[-1]] for row in orders if row)


# ---------------------------------------------------------------------- one window
def closed_cut(inst: Instance, orders: list[list[Op]], cut: list[int]) -> list[int]:
    """Shrink per-device prefixes ``orders[d][:cut[d]]`` until every op in them has all its
    predecessors in them too (what stays fixed before a window must not wait for the window)."""
    from zbsolve.dag import deps

    pos = {op: (d, i) for d, row in enumerate(orders) for i, op in enumerate(row)}
    cut = list(cut)
    changed = True
    while changed:
        changed = False
        for d, row in enumerate(orders):
            for i in range(cut[d]):
                if any(pos[q][1] >= cut[pos[q][0]] for q, _ in deps(inst, row[i])
                       if q in pos):
                    cut[d] = i
                    changed = True
                    break
    return cut


def mb_cut(orders: list[list[Op]], sim: SimResult, j: int) -> list[int]:
    """Per device, where the backward wave of microbatch j passes: the index of its first op that
    starts at or after I(lowest stage of the device, j). A diagonal through time that follows
    the pipeline (a vertical time cut would split the long cool-down of the first devices)."""
    out = []
    for row in orders:
        if j >= max((op.mb for op in row), default=-1) + 1:
            out.append(len(row))
            continue
        low = min(op.stage for op in row)
        t = sim.start[Op("I", low, j)]
        out.append(next((k for k, op in enumerate(row) if sim.start[op] >= t - TOL), len(row)))
    return out


def _solve_window(
    si: Instance,
    orders: list[list[Op]],
    sim: SimResult,
    lo_cut: list[int],
    hi_cut: list[int],
    objective: str,
    time_limit: float,
    cfg: LNSConfig,
) -> tuple[list[list[Op]] | None, bool, int]:
    """Re-solve ``orders[d][lo_cut[d]:hi_cut[d]]`` for all d (both cuts predecessor-closed);
    returns (new orders or None, proved optimal, window size)."""
    from ortools.sat.python import cp_model

    from zbsolve.dag import deps

    p = si.devices
    split = list(zip(lo_cut, hi_cut))
    win: list[Op] = [op for d in range(p) for op in orders[d][split[d][0]:split[d][1]]]
    if len(win) < 2:
        return None, True, len(win)
    in_win = set(win)
    dur = {op: int(round(si.duration(op.kind, op.stage))) for op in win}
    model = cp_model.CpModel()
    lo: dict[Op, int] = {}
    for d in range(p):
        i, _ = split[d]
        ready = int(round(sim.end[orders[d][i - 1]])) if i > 0 else 0
        for op in orders[d][split[d][0]:split[d][1]]:
            lo[op] = ready
    for op in win:
        for pred, delay in deps(si, op):
            if pred not in in_win:
                lo[op] = max(lo[op], int(round(sim.end[pred] + delay)))
    horizon = max(lo.values()) + sum(dur.values()) + int(round(si.comm)) * len(win) + 1
    start = {op: model.new_int_var(lo[op], horizon, str(op)) for op in win}
    for op in win:
        for pred, delay in deps(si, op):
            if pred in in_win:
                model.add(start[op] >= start[pred] + dur[pred] + int(round(delay)))
    terms = []
    z = model.new_int_var(0, 4 * horizon + int(round(objective_value(sim, objective))), "z")
    for d in range(p):
        i, j = split[d]
        ops = orders[d][i:j]
        if not ops:
            continue
        model.add_no_overlap(
            [model.new_fixed_size_interval_var(start[o], dur[o], f"i{o}") for o in ops]
        )
        end_d = model.new_int_var(0, horizon, f"end{d}")
        for o in ops:
            model.add(end_d >= start[o] + dur[o])
        inc_end = int(round(sim.end[ops[-1]]))
        tail = int(round(sim.end[orders[d][-1]])) - inc_end
        first = int(round(sim.start[orders[d][0]]))
        model.add(z >= end_d + tail - (first if objective == "span" else 0))
        terms.append(end_d)
        _window_memory(model, si, d, orders[d][:i], ops, start, dur)
        for o in ops:
            model.add_hint(start[o], int(round(sim.start[o])))
    model.minimize(len(terms) * z + sum(terms))
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(time_limit, 0.05)
    prm.num_workers = cfg.workers
    prm.random_seed = cfg.seed
    code = solver.solve(model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, False, len(win)
    new = []
    for d in range(p):
        i, j = split[d]
        mid = sorted(orders[d][i:j], key=lambda o: (solver.value(start[o]), o.kind != "I"))
        new.append(orders[d][:i] + mid + orders[d][j:])
    return new, code == cp_model.OPTIMAL, len(win)


def _window_memory(model, si: Instance, d: int, before: Sequence[Op], ops: Sequence[Op],
                   start: dict, dur: dict) -> None:
    """Reservoir of the window's memory events on device d, from its level after ``before``.

    Every op before the window ends before any window op of d starts, so their net effect is a
    constant initial level; the window itself only reorders, so the level after it is unchanged.
    """
    limit = si.limit[d]
    if limit is None:
        return
    act, wgt = si.activation, si.weight

    def effect(o: Op) -> float:
        if o.kind == "F":
            return act[o.stage]
        if o.kind == "I":
            return -(act[o.stage] - wgt[o.stage])
        if o.kind == "B":
            return -act[o.stage]
        return -wgt[o.stage]

    level0 = int(round(sum(effect(o) for o in before)))
    alloc = sum(int(round(act[o.stage])) for o in ops if o.kind == "F")
    if level0 + alloc <= limit + TOL:
        return  # cannot bind inside this window
    times, changes = [0], [level0]
    for o in ops:
        e = int(round(effect(o)))
        if e == 0:
            continue
        times.append(start[o] if o.kind == "F" else start[o] + dur[o])
        changes.append(e)
    model.add_reservoir_constraint(times, changes, 0, int(math.floor(limit + TOL)))


# ---------------------------------------------------------------------- the search
def improve(
    inst: Instance,
    sched: Schedule,
    objective: str = "makespan",
    time_limit: float = 30.0,
    *,
    config: LNSConfig | None = None,
    bound: float | None = None,
    gap: float = 0.0,
    progress: Any = None,
) -> tuple[Schedule, SimResult, LNSStats]:
    """Rolling-window LNS from ``sched`` (which must be valid); returns the best valid schedule.

    ``progress``: None, or an object with ``note(value, bound, what)`` (zbsolve.solver.progress).
    Never returns anything worse than ``sched`` by the simulator on ``inst``.
    """
    from zbsolve.solver.model import TimeScale, scaled_instance

    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    cfg = config or LNSConfig()
    t_start = time.perf_counter()
    deadline = t_start + time_limit
    start_sim = validate(inst, sched)
    bound = quick_bound(inst, objective) if bound is None else bound
    stats = LNSStats()
    scale = TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    orders = [list(row) for row in split_fused(sched).orders]
    sim = simulate(si, Schedule(orders))
    if not sim.feasible:  # rounding made the scaled memory stricter: nothing to search from
        return sched, start_sim, stats
    best_key = _key(sim, orders, objective)
    n_ops = sum(len(o) for o in orders)
    m = inst.microbatches
    per_mb = max(1, n_ops // m)
    size = max(1, min(m, cfg.window_ops // per_mb))  # microbatches per window
    max_size = max(1, min(m, cfg.max_ops // per_mb))
    pass_improved = False
    pos = 0  # first microbatch of the window
    best_orders = orders
    best_true_value = objective_value(start_sim, objective)

    def report(what: str) -> None:
        elapsed = time.perf_counter() - t_start
        stats.history.append((elapsed, best_true_value, bound))
        if progress is not None:
            progress.note(best_true_value, bound, what)

    report("large: start")
    while time.perf_counter() < deadline - 0.05:
        if best_true_value <= bound * (1 + gap) + TOL:
            break
        if pos >= m:
            stats.passes += 1
            if not pass_improved:
                if size >= max_size:
                    break  # a whole pass at the largest window found nothing
                size = min(max_size, max(size + 1, int(size * 1.5)))
            pass_improved, pos = False, 0
        lo_cut = closed_cut(si, orders, mb_cut(orders, sim, pos))
        hi_cut = closed_cut(si, orders, mb_cut(orders, sim, pos + size))
        lo_cut = [min(a, b) for a, b in zip(lo_cut, hi_cut)]
        left = deadline - time.perf_counter()
        limit = min(cfg.window_time, max(left - 0.05, 0.05))
        new, optimal, n_win = _solve_window(si, orders, sim, lo_cut, hi_cut, objective, limit, cfg)
        stats.windows += 1
        stats.optimal_windows += int(optimal)
        if optimal and n_win < n_ops and size < max_size:
            size = min(max_size, max(size + 1, int(size * 1.25)))
        elif not optimal:
            size = max(1, int(size * 0.8))
        if new is not None:
            try:
                cand = simulate(si, Schedule(new))
            except ScheduleError:
                cand = None  # cannot happen for a precedence-respecting window; be safe
            if cand is not None and cand.feasible:
                key = _key(cand, new, objective)
                if key[0] <= best_key[0] + TOL and key[1] < best_key[1] - TOL:
                    true = simulate(inst, Schedule(new))
                    if true.feasible and objective_value(true, objective) <= best_true_value + TOL:
                        orders, sim, best_key = new, cand, key
                        pass_improved = True
                        stats.accepted += 1
                        best_orders = new
                        if objective_value(true, objective) < best_true_value - TOL:
                            best_true_value = objective_value(true, objective)
                            report(f"large: window {stats.windows} ({n_win} ops)")
        if pos + size >= m:
            pos = m  # the pass is over
        else:  # slide, and let the last window end with the schedule
            pos = min(pos + max(1, int(size * (1 - cfg.overlap))), m - size)
    out = Schedule([list(r) for r in best_orders], name=f"lns-{objective}")
    return out, validate(inst, out), stats


def split_fused(sched: Schedule) -> Schedule:
    """Fused B ops become I then W in place (never later, never more memory)."""
    if not any(op.kind == "B" for row in sched.orders for op in row):
        return sched
    rows = [
        [x for op in row for x in ((Op("I", op.stage, op.mb), Op("W", op.stage, op.mb))
                                   if op.kind == "B" else (op,))]
        for row in sched.orders
    ]
    return Schedule(rows, name=f"{sched.name}+split", meta=dict(sched.meta))


def _as_list(hints: Schedule | Iterable[Schedule] | None) -> list[Schedule]:
    if hints is None:
        return []
    if isinstance(hints, Schedule):
        return [hints]
    return list(hints)


def solve_large(
    inst: Instance, options: Any, hints: Schedule | Iterable[Schedule] | None = None
) -> tuple[Schedule | None, float | None]:
    """The ``method="large"`` solver of ``zbsolve.solver.api`` (contract documented there).

    Starts from the best of the greedy heuristic and the hints (each validated by the simulator,
    invalid or over-memory ones dropped), then runs ``improve`` for the time left. Returns the
    best validated schedule (its ``meta["large"]`` holds the search statistics) and a cheap valid
    lower bound. ``options`` needs ``time_limit`` and ``objective``; ``workers``, ``seed``,
    ``gap`` and ``progress`` are used when present.
    """
    t0 = time.perf_counter()
    objective = getattr(options, "objective", "makespan")
    time_limit = float(getattr(options, "time_limit", 60.0))
    cfg = LNSConfig(workers=int(getattr(options, "workers", 2) or 2),
                    seed=int(getattr(options, "seed", 0) or 0))
    bound = quick_bound(inst, objective)
    tracker = None
    if getattr(options, "progress", False):
        from zbsolve.solver.progress import Progress

        tracker = Progress(1.0, objective, echo=True, floor=bound)

    starts: list[tuple[float, str, Schedule]] = []
    heur, heur_sim = heuristic_schedule(inst, objective, time_limit=max(1.0, 0.2 * time_limit))
    starts.append((objective_value(heur_sim, objective), "heuristic", heur))
    for h in _as_list(hints):
        try:
            sim = simulate(inst, h)
        except ScheduleError:
            continue
        if sim.feasible:
            starts.append((objective_value(sim, objective), h.name, h))
    starts.sort(key=lambda x: x[0])
    value, name, first = starts[0]
    left = time_limit - (time.perf_counter() - t0)
    if left > 0.5:
        best, _, stats = improve(inst, first, objective, left, config=cfg, bound=bound,
                                 gap=float(getattr(options, "gap", 0.0) or 0.0), progress=tracker)
    else:
        best, stats = first, LNSStats()
    best.meta["large"] = {
        "start": name, "start_value": value, "quick_bound": bound,
        "candidates": [(n, v) for v, n, _ in starts], **stats.as_dict(),
        "wall": time.perf_counter() - t0,
    }
    return best, bound
