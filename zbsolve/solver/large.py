"""Large instances: large-neighbourhood search over rolling windows, started from the greedy.

Why this design (numbers and the alternatives tried in docs/scale.md): at p=32, m=256 (24,576
ops) building the monolithic CP-SAT model alone takes ~5 s in Python and CP-SAT then stalls on 2
cores, while the greedy (``zbsolve.solver.heuristic``) is already at or within a fraction of a
percent of the lower bound. What is left to gain is local, and a window model that contains only
the window's ops is cheap:

* incumbent = per-device orders, timed by the simulator (ASAP);
* window = on each device, the ops from where the backward wave of microbatch j passes to where
  that of microbatch j+k passes (``mb_cut``), both cuts shrunk until predecessor-closed
  (``closed_cut``): everything before stays where it is and fixes the window's release times
  (device free time, input arrival) and each device's memory at the window's start;
* CP-SAT re-solves the window (intervals, precedences with comm, NoOverlap per device, memory as
  a cumulative over activation lifetimes clipped at the window's borders), hinted completely with
  the incumbent. Its objective is exact, not an estimate: with the orders after the window kept,
  each device's end is max over the window's exits of (exit end + delay + the longest path from
  there to that device's last op through the fixed orders), precomputed per window
  (``_post_tails``); second, the sum of the devices' window ends (pack left). With the step
  boundary (``zbsolve.step``) the fixed part after the window also holds the step's implicit
  jobs and each device's optimizer steps (the tail rule, in the incumbent's order: the
  simulator's earliest-ready order can only end sooner, so the objective is then an upper bound);
* the new orders are re-timed by the simulator and accepted if the objective is no worse and the
  devices finish earlier. Memory after the window is unchanged by construction (same ops in the
  window; memory depends on the order only), and the simulator re-checks it anyway;
* memory modes: the incumbent's stay fixed (read off its ops, ``TaskGraph.of``): a recompute R
  is a compute job with its precedences and lifetimes like any other, so windows reorder it; a
  schedule with offload copies is returned as it is (the window model has no copy stream).

Windows slide with 50% overlap; a pass with every window proven optimal widens them, one with
time-outs narrows and shifts them; the search stops at the time limit, at the bound, or after a
whole pass at the widest windows proved nothing can improve. Everything runs on the integer-scaled
instance of ``zbsolve.solver.model.TimeScale`` so CP-SAT and the simulator agree exactly; the
result is validated on the true instance and is never worse than the start. Anytime: the best
schedule so far is always at hand.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zbsolve.graph import START, TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Kind, Op
from zbsolve.schedule import Schedule, split_backward
from zbsolve.simulate import ScheduleError, SimResult, simulate, validate
from zbsolve.solver.bounds import device_lower_bounds
from zbsolve.solver.heuristic import OBJECTIVES, GreedyDeadlock, heuristic_schedule
from zbsolve.solver.progress import rel_gap

TOL = 1e-6
COPY_KINDS = ("O", "L")  # memory-mode copies: on a copy stream the window model lacks
GAVE_UP = ("converged", "stalled", "kept")  # ``LNSStats.ended``: stopped early, bound not met


@dataclass
class LNSConfig:
    """Knobs of the window search (defaults measured on the ICLR and p=32 m=256 instances)."""

    window_ops: int = 200  # initial target number of ops per window (rounded to microbatches)
    max_ops: int = 3000
    window_time: float = 2.0  # CP-SAT seconds per window at most
    overlap: float = 0.5  # fraction of a window the next one shares
    workers: int = 2
    seed: int = 0
    deterministic: bool = False  # seconds are CP-SAT deterministic seconds (reproducible)


@dataclass
class LNSStats:
    windows: int = 0
    accepted: int = 0
    optimal_windows: int = 0
    passes: int = 0
    history: list[tuple[float, float, float]] = field(default_factory=list)  # elapsed, value, bound
    dtime: float = 0.0  # CP-SAT deterministic seconds, all windows
    # why the search ended: "limit" (time), "bound" (met the bound or the gap), "converged"
    # (a whole pass at the largest size found every window optimal as it was), "stalled" (with
    # ``improve``'s ``stall``: a whole pass accepted no window), "kept" (nothing the windows can
    # search: overlapped pairs, copy streams, or memory that rounding made stricter)
    ended: str = "limit"

    @property
    def gave_up(self) -> bool:
        """The windows stopped before the limit with the bound not met: the time left is
        better spent on another search (``api.solve`` hands it to the whole model)."""
        return self.ended in GAVE_UP

    def as_dict(self) -> dict[str, Any]:
        return {"windows": self.windows, "accepted": self.accepted,
                "optimal_windows": self.optimal_windows, "passes": self.passes,
                "history": self.history, "dtime": self.dtime, "ended": self.ended}


def quick_bound(inst: Instance, objective: str) -> float:
    """A cheap valid lower bound (the analytic one can take seconds at this size).

    span >= busy time of every device; makespan >= earliest first start + work of every device.
    """
    if objective == "span":
        return max(inst.device_work(d) for d in range(inst.devices))
    return max(device_lower_bounds(inst))


def _key(sim: SimResult, orders: list[list[Op]], objective: str) -> tuple[float, float]:
    """Objective, then the sum of the devices' finish times (lets the search walk plateaus)."""
    return sim.value(objective), sum(sim.end[row[-1]] for row in orders if row)


# ---------------------------------------------------------------------- one window
def closed_cut(graph: TaskGraph, orders: list[list[Op]], cut: list[int],
               needs: list[np.ndarray] | None = None) -> list[int]:
    """Shrink per-device prefixes ``orders[d][:cut[d]]`` until every op in them has all its
    predecessors in them too (what stays fixed before a window must not wait for the window).

    The answer is the largest predecessor-closed cut at or below ``cut`` (closed cuts are
    closed under componentwise min, so it is unique). ``needs``: ``cut_needs(graph, orders)``,
    which a caller with many cuts of one incumbent computes once."""
    needs = cut_needs(graph, orders) if needs is None else needs
    cut = list(cut)
    changed = True
    while changed:
        changed = False
        limit = np.array(cut)
        for d, need in enumerate(needs):
            bad = (need[1:cut[d] + 1] > limit).any(axis=1)  # row[:i+1] waits past the cut
            if bad.any():
                cut[d] = limit[d] = int(np.argmax(bad))
                changed = True
    return cut


def cut_needs(graph: TaskGraph, orders: list[list[Op]]) -> list[np.ndarray]:
    """Per device d, an array whose row i holds, for every device e, how long a prefix of e's
    order the first i ops of d's order wait for (1 + the index of their last predecessor on e,
    0: none): ``orders[d][:i]`` is closed under a cut c iff row i <= c everywhere."""
    pos = positions(orders)
    out = []
    for row in orders:
        need = np.zeros((len(row) + 1, len(orders)), dtype=np.int64)
        for i, op in enumerate(row):
            need[i + 1] = need[i]
            for q, _ in graph.preds(op):
                at = pos.get(q)
                if at is not None:
                    need[i + 1, at[0]] = max(need[i + 1, at[0]], at[1] + 1)
        out.append(need)
    return out


def mb_cut(inst: Instance, orders: list[list[Op]], sim: SimResult, j: int) -> list[int]:
    """Per device, where the backward wave of microbatch j passes: the index of its first op that
    starts at or after the first I of j on the lowest stage of the device that runs j (its last
    segment's: a microbatch's segments go back newest first). A diagonal through time
    that follows the pipeline (a vertical time cut would split the long cool-down of the first
    devices)."""
    if j <= 0:
        return [0] * len(orders)
    out = []
    for row in orders:
        if j >= max((op.mb for op in row), default=-1) + 1:
            out.append(len(row))
            continue
        low = min(op.stage for op in row if j in inst.microbatches_of(op.stage))
        t = sim.start[Op(Kind.I, low, j, inst.segments - 1)]  # j's first I: its last segment
        out.append(next((k for k, op in enumerate(row) if sim.start[op] >= t - TOL), len(row)))
    return out


def _solve_window(
    si: Instance,
    graph: TaskGraph,
    orders: list[list[Op]],
    sim: SimResult,
    lo_cut: list[int],
    hi_cut: list[int],
    objective: str,
    time_limit: float,
    cfg: LNSConfig,
    tails: Mapping[Op, dict[int, int]],
    lead: Sequence[int],
) -> tuple[list[list[Op]] | None, bool, int, float, float]:
    """Re-solve ``orders[d][lo_cut[d]:hi_cut[d]]`` for all d (both cuts predecessor-closed);
    returns (new orders or None, proved optimal, window size, CP-SAT deterministic time, CP-SAT
    wall seconds).
    ``tails``: ``_post_tails`` of this cut (the search passes a ``SuffixTails`` view);
    ``lead``: where each device's objective is measured from (``_leads``)."""
    from ortools.sat.python import cp_model

    p = si.devices
    split = list(zip(lo_cut, hi_cut))
    win: list[Op] = [op for d in range(p) for op in orders[d][split[d][0]:split[d][1]]]
    if len(win) < 2:
        return None, True, len(win), 0.0, 0.0
    in_win = set(win)
    dur = {op: int(round(graph.duration(op))) for op in win}
    model = cp_model.CpModel()
    lo: dict[Op, int] = {}
    for d in range(p):
        i, _ = split[d]
        ready = int(round(sim.end[orders[d][i - 1]])) if i > 0 else 0
        for op in orders[d][split[d][0]:split[d][1]]:
            lo[op] = ready
    for op in win:
        for pred, delay in graph.preds(op):
            if pred not in in_win:
                lo[op] = max(lo[op], int(round(sim.end[pred] + delay)))
    horizon = max(lo.values()) + sum(dur.values()) + int(round(si.comm)) * len(win) + 1
    start = {op: model.new_int_var(lo[op], horizon, str(op)) for op in win}
    for op in win:
        for pred, delay in graph.preds(op):
            if pred in in_win:
                model.add(start[op] >= start[pred] + dur[pred] + int(round(delay)))
    per_device = objective == "span"
    top = int(round(sim.value(objective))) + horizon
    z = model.new_int_var(0, top, "z")
    reach = [model.new_int_var(0, top + max(lead), f"reach{d}") for d in range(p)]
    for e in range(p):
        model.add(z >= reach[e] - lead[e])
    for e, v in _fixed_reach(graph, orders, sim, split, tails).items():
        model.add(reach[e] >= v)
    terms = []
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
        terms.append(end_d)
        model.add_hint(end_d, int(round(max(sim.end[o] for o in ops))))
        for o in ops:  # exits through the DAG into the fixed part after the window
            for e, extra in _exit_vector(graph, o, tails).items():
                model.add(reach[e] >= start[o] + dur[o] + extra)
        if j < len(orders[d]):  # the device's next fixed op waits for all its window ops
            for e, extra in tails[orders[d][j]].items():
                model.add(reach[e] >= end_d + extra)
        else:
            model.add(reach[d if per_device else 0] >= end_d)
        _window_memory(model, graph, d, orders[d][:i], ops, start, dur, horizon)
        for o in ops:
            model.add_hint(start[o], int(round(sim.start[o])))
    # A complete hint (aux variables too): CP-SAT then starts from the incumbent at once.
    if per_device:
        inc_reach = [int(round(sim.end[row[-1]])) if row else 0 for row in orders]
    else:
        inc_reach = [int(round(sim.makespan))] + [0] * (p - 1)
    for e in range(p):
        model.add_hint(reach[e], inc_reach[e])
    model.add_hint(z, max(r - f for r, f in zip(inc_reach, lead)))
    model.minimize(len(terms) * z + sum(terms))
    from zbsolve.solver.cpsat import new_solver, run

    solver = new_solver(max(time_limit, 0.05), workers=cfg.workers, seed=cfg.seed,
                        deterministic=cfg.deterministic)
    code = run(solver, model)
    dtime, wall = solver.deterministic_time, solver.wall_time
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, False, len(win), dtime, wall
    new = []
    for d in range(p):
        i, j = split[d]
        mid = sorted(orders[d][i:j], key=lambda o: (solver.value(start[o]), o.kind != "I"))
        new.append(orders[d][:i] + mid + orders[d][j:])
    return new, code == cp_model.OPTIMAL, len(win), dtime, wall


def _leads(si: Instance, objective: str) -> list[int]:
    """Per device, where the window objective measures it from: its first head for span, 0."""
    return _first_heads(si) if objective == "span" else [0] * si.devices


def _first_heads(si: Instance) -> list[int]:
    """Per device, its head: where its span is measured from (``TaskGraph.device_heads``)."""
    return [int(round(h)) for h in TaskGraph(si).device_heads()]


def _post_tails(graph: TaskGraph, orders: list[list[Op]], sim: SimResult, hi_cut: list[int],
                per_device: bool) -> dict[Op, dict[int, int]]:
    """For every op after the window: the longest path from its start to the end of each device
    (``per_device``, for span) or of the schedule (key 0, makespan), through the fixed orders.

    With the orders after the window fixed, the simulator's ASAP timing makes every device end
    = max over the window's exits of (exit end + delay + this tail): the window objective is then
    exact, not an estimate.
    """
    nxt: dict[Op, Op] = {}
    fixed: list[Op] = []
    step_tail: list[Op] = []  # the devices' optimizer steps (rows end with them: _with_tails)
    for row, cut in zip(orders, hi_cut):
        after = row[cut:]
        fixed += [o for o in after if not graph.is_tail(o)]
        step_tail += reversed([o for o in after if graph.is_tail(o)])
        nxt.update(zip(after, after[1:]))
    # Successors first: the optimizer steps (nothing but the next one waits for them), the
    # implicit ops against the graph's order (zero-length ones can tie in time), then the rest
    # by start time. They end the step (makespan); only device ops end a span.
    post = step_tail + list(reversed(list(graph.implicit_ops())))
    post += sorted(fixed, key=lambda o: -sim.start[o])
    tails: dict[Op, dict[int, int]] = {}
    for q in post:
        best: dict[int, int] = {}
        cands = [(r, c) for r, c in graph.succs(q) if r in tails]
        if q in nxt:
            cands.append((nxt[q], 0.0))
        for r, c in cands:
            for e, v in tails[r].items():
                best[e] = max(best.get(e, -1), int(round(c)) + v)
        dq = int(round(graph.duration(q)))
        out = {e: dq + v for e, v in best.items()}
        device = graph.device(q)
        if device is None:
            if not per_device:
                out[0] = max(out.get(0, 0), dq)
        elif q not in nxt:  # the last op of its device ends that device
            key = device if per_device else 0
            out[key] = max(out.get(key, 0), dq)
        tails[q] = out
    return tails


class SuffixTails(Mapping):
    """``_post_tails`` of a cut, read from those of the whole schedule (cut at 0).

    An op after the cut reaches the ends only through its graph successors and the ops after it
    on its device, and all of them lie after the cut too (the cut is predecessor-closed), in the
    same relative order in ``_post_tails``' walk: so its tail does not depend on where the cut
    is, and one walk per incumbent serves every window (at p = 32, m = 256 the walk takes 1 s,
    the window's CP-SAT 0.1 s). Ops before the cut are not in the view.
    """

    def __init__(self, full: Mapping[Op, dict[int, int]], position: Mapping[Op, tuple[int, int]],
                 hi_cut: Sequence[int]) -> None:
        self._full, self._position, self._cut = full, position, hi_cut

    def __contains__(self, op: object) -> bool:
        if op not in self._full:
            return False
        at = self._position.get(op)  # type: ignore[call-overload]
        return at is None or at[1] >= self._cut[at[0]]  # None: a job off the devices' rows

    def __getitem__(self, op: Op) -> dict[int, int]:
        if op not in self:
            raise KeyError(op)
        return self._full[op]

    def __iter__(self) -> Iterator[Op]:
        return (op for op in self._full if op in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def positions(orders: Sequence[Sequence[Op]]) -> dict[Op, tuple[int, int]]:
    """Each op's (device, index) in ``orders``."""
    return {op: (d, i) for d, row in enumerate(orders) for i, op in enumerate(row)}


def _with_tails(graph: TaskGraph, orders: list[list[Op]], sim: SimResult) -> list[list[Op]]:
    """Each device's order followed by its optimizer steps as the simulator ran them (the tail
    rule): what comes after a window that reaches the end of a device's order."""
    return [row + sorted(graph.tail_ops(d), key=lambda o: (sim.start[o], o.stage))
            for d, row in enumerate(orders)]


def _exit_vector(graph: TaskGraph, o: Op, tails: Mapping[Op, dict[int, int]]) -> dict[int, int]:
    """How far past the end of window op ``o`` each device's end (key) lies, through its graph
    successors in the fixed part after the window."""
    out: dict[int, int] = {}
    for r, c in graph.succs(o):
        for e, v in tails.get(r, {}).items():
            out[e] = max(out.get(e, -1), int(round(c)) + v)
    return out


def _fixed_reach(graph: TaskGraph, orders: list[list[Op]], sim: SimResult,
                 split: list[tuple[int, int]], tails: Mapping[Op, dict[int, int]]
                 ) -> dict[int, int]:
    """The part of each device's end that the window cannot change: paths that enter the fixed
    part after the window from the fixed part before it."""
    out: dict[int, int] = {}

    def take(base: float, r: Op, c: float) -> None:
        for e, v in tails[r].items():
            out[e] = max(out.get(e, 0), int(round(base + c)) + v)

    for d, row in enumerate(orders):
        i, j = split[d]
        for o in row[:i]:
            for r, c in graph.succs(o):
                if r in tails:
                    take(sim.end[o], r, c)
        if i == j and j < len(row):  # no window op on d: its fixed parts touch directly
            take(sim.end[row[i - 1]] if i > 0 else 0.0, row[j], 0.0)
    return out


def _window_memory(model, graph: TaskGraph, d: int, before: Sequence[Op], ops: Sequence[Op],
                   start: dict, dur: dict, horizon: int) -> None:
    """Memory of device d inside the window as a cumulative over the graph's lifetimes.

    A lifetime runs from its birth (F's start) to its death (the end of the op that frees it).
    Lifetimes born before the window start at 0; those that die after it run to the horizon;
    those spanning the whole window only lower the capacity; those born after it do not count.
    Measured faster here than a reservoir, whose expansion made CP-SAT's presolve eat the whole
    window budget.
    """
    si = graph.inst
    limit = si.limit[d]
    if limit is None:
        return
    in_win, done = set(ops), set(before)

    def at(op: Op, edge: int):
        return start[op] if edge == START else start[op] + dur[op]

    constant = 0
    intervals, demands = [], []
    for lt in graph.device_lifetimes(d):
        if lt.dies in done or not (lt.born in done or lt.born in in_win):
            continue  # over before the window, or not begun by its end
        demand = int(round(lt.amount))
        if lt.born in done and lt.dies not in in_win:
            constant += demand  # alive through the whole window
            continue
        lo = at(lt.born, lt.born_at) if lt.born in in_win else 0
        hi = at(lt.dies, lt.dies_at) if lt.dies in in_win else horizon
        size = model.new_int_var(0, horizon, f"life{lt.dies}")
        intervals.append(model.new_interval_var(lo, size, hi, f"mem{lt.dies}"))
        demands.append(demand)
    cap = int(math.floor(limit + TOL)) - int(round(si.resident(d))) - constant
    if sum(demands) <= cap:
        return  # cannot bind inside this window
    model.add_cumulative(intervals, demands, cap)


# ---------------------------------------------------------------------- the search
def window_sizes(n_ops: int, m: int, cfg: LNSConfig) -> tuple[int, int]:
    """Microbatches per window for a schedule of ``n_ops`` ops: the first windows' (about
    ``cfg.window_ops`` ops) and the largest the search may widen to (``cfg.max_ops``)."""
    per_mb = max(1, n_ops // m)
    return max(1, min(m, cfg.window_ops // per_mb)), max(1, min(m, cfg.max_ops // per_mb))


def first_window_is_whole(inst: Instance, sched: Schedule, cfg: LNSConfig | None = None
                          ) -> bool:
    """True where ``improve``'s first window would hold every microbatch of ``sched``: its
    windows are then the whole model, solved again and again for ``cfg.window_time`` each."""
    n_ops = sum(len(row) for row in split_backward(sched).orders)
    return window_sizes(n_ops, inst.microbatches, cfg or LNSConfig())[0] >= inst.microbatches


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
    stall: bool = False,
) -> tuple[Schedule, SimResult, LNSStats]:
    """Rolling-window LNS from ``sched`` (which must be valid); returns the best valid schedule.

    ``progress``: None, or an object with ``note(value, bound, what)`` (zbsolve.solver.progress).
    ``stall``: stop at the end of a pass (the windows have visited every microbatch once) that
    accepted no window, instead of trying wider or narrower windows; ``stats.ended`` then says
    "stalled". Never returns anything worse than ``sched`` by the simulator on ``inst``.
    """
    from zbsolve.solver.model import TimeScale, scaled_instance

    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    cfg = config or LNSConfig()
    t_start = time.perf_counter()
    deadline = t_start + time_limit
    spent = [0.0]  # CP-SAT deterministic seconds (the clock in deterministic mode)

    def left() -> float:
        if cfg.deterministic:
            return time_limit - spent[0]
        return deadline - time.perf_counter()

    t_validate = time.perf_counter()
    start_sim = validate(inst, sched)
    validate_seconds = time.perf_counter() - t_validate
    bound = quick_bound(inst, objective) if bound is None else bound
    stats = LNSStats(ended="kept")
    if sched.has_pairs:  # the window model has no pair choices: keep the schedule as it is
        return sched, start_sim, stats
    if any(op.kind in COPY_KINDS for op in sched.ops()):
        return sched, start_sim, stats  # nor copy streams (offload): kept as it is
    scale = TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    orders = [list(row) for row in split_backward(sched).orders]
    # the incumbent's memory modes stay fixed: its recomputes are jobs like any other
    graph = TaskGraph.of(si, (op for row in orders for op in row))
    sim = simulate(si, Schedule(orders))
    if not sim.feasible:  # rounding made the scaled memory stricter: nothing to search from
        return sched, start_sim, stats
    stats.ended = "limit"
    best_key = _key(sim, orders, objective)
    m = inst.microbatches
    size, max_size = window_sizes(sum(len(o) for o in orders), m, cfg)
    pass_improved, pass_optimal = False, True
    pos = 0  # first microbatch of the window
    best_orders = orders
    best_true_value = start_sim.value(objective)

    def report(what: str) -> None:
        elapsed = time.perf_counter() - t_start
        stats.history.append((elapsed, best_true_value, bound))
        if progress is not None:
            progress.note(best_true_value, bound, what)

    report("large: start")
    per_device = objective == "span"
    lead = _leads(si, objective)
    incumbent = None  # (rows with the optimizer steps, positions, cut needs, tails): once each
    # Wall seconds a window costs besides its CP-SAT run (cuts, model, re-timing; the most seen
    # so far), and the final validations of this function and of its caller (three times the
    # first one: measured 0.26-0.47 s each at p = 32, m = 256): a window that cannot end by the
    # limit is not begun, so the limit bounds the whole search. Deterministic mode counts
    # CP-SAT's own time only, so no wall clock may decide anything there.
    overhead, finish = 0.0, 0.0 if cfg.deterministic else 3.0 * validate_seconds
    walk = 0.0  # wall seconds of the last walk of an incumbent (it is paid again on a change)
    while left() > max(0.05, overhead + finish + (walk if incumbent is None else 0.0)):
        t_window, fresh = time.perf_counter(), incumbent is None
        if best_true_value <= bound + TOL or rel_gap(best_true_value, bound) <= gap:
            stats.ended = "bound"
            break
        if pos >= m:
            stats.passes += 1
            if stall and not pass_improved:
                stats.ended = "stalled"
                break
            if not pass_improved:
                if pass_optimal and size >= max_size:
                    # every window of a whole pass at the largest size is optimal as is
                    stats.ended = "converged"
                    break
                # all optimal: look wider; some timed out: look narrower, shifted windows
                size = (min(max_size, max(size + 1, int(size * 1.5))) if pass_optimal
                        else max(1, size // 2))
            pass_improved, pass_optimal = False, True
            pos = (stats.passes % 2) * (size // 2)
        if incumbent is None:
            ext = _with_tails(graph, orders, sim)
            incumbent = (ext, positions(ext), cut_needs(graph, orders),
                         _post_tails(graph, ext, sim, [0] * inst.devices, per_device))
            walk = time.perf_counter() - t_window
        ext, position, needs, full_tails = incumbent
        lo_cut = closed_cut(graph, orders, mb_cut(si, orders, sim, pos), needs)
        hi_cut = closed_cut(graph, orders, mb_cut(si, orders, sim, pos + size), needs)
        lo_cut = [min(a, b) for a, b in zip(lo_cut, hi_cut)]
        limit = min(cfg.window_time, max(left() - overhead - finish, 0.05))
        new, optimal, n_win, dtime, cp_wall = _solve_window(
            si, graph, ext, sim, lo_cut, hi_cut, objective, limit, cfg,
            SuffixTails(full_tails, position, hi_cut), lead)
        spent[0] += dtime
        stats.dtime = spent[0]
        if new is not None and graph.has_step:
            new = [[o for o in row if not graph.is_tail(o)] for row in new]
        stats.windows += 1
        stats.optimal_windows += int(optimal)
        pass_optimal = pass_optimal and optimal
        if new is not None and new != orders:  # the same orders: nothing to re-time
            try:
                cand = simulate(si, Schedule(new))
            except ScheduleError:
                cand = None  # cannot happen for a precedence-respecting window; be safe
            if cand is not None and cand.feasible:
                key = _key(cand, new, objective)
                if key[0] <= best_key[0] + TOL and key[1] < best_key[1] - TOL:
                    true = simulate(inst, Schedule(new))
                    if true.feasible and true.value(objective) <= best_true_value + TOL:
                        orders, sim, best_key = new, cand, key
                        incumbent = None
                        pass_improved = True
                        stats.accepted += 1
                        best_orders = new
                        if true.value(objective) < best_true_value - TOL:
                            best_true_value = true.value(objective)
                            report(f"large: window {stats.windows} ({n_win} ops)")
        if not cfg.deterministic:
            overhead = max(overhead, time.perf_counter() - t_window - cp_wall
                           - (walk if fresh else 0.0))
        if pos + size >= m:
            pos = m  # the pass is over
        else:  # slide, and let the last window end with the schedule
            pos = min(pos + max(1, int(size * (1 - cfg.overlap))), m - size)
    out = Schedule([list(r) for r in best_orders], name=f"lns-{objective}")
    return out, validate(inst, out), stats


def _as_list(hints: Schedule | Iterable[Schedule] | None) -> list[Schedule]:
    if hints is None:
        return []
    if isinstance(hints, Schedule):
        return [hints]
    return list(hints)


def solve_large(
    inst: Instance, options: Any, hints: Schedule | Iterable[Schedule] | None = None,
    *, greedy: bool = True, stall: bool = False,
) -> tuple[Schedule | None, float | None]:
    """The ``method="large"`` solver of ``zbsolve.solver.api`` (contract documented there).

    Starts from the best of the greedy heuristic and the hints (each validated by the simulator,
    invalid or over-memory ones dropped), then runs ``improve`` for the time left. Returns the
    best validated schedule (its ``meta["large"]`` holds the search statistics) and a cheap valid
    lower bound. ``options`` needs ``time_limit`` and ``objective``; ``workers``, ``seed``,
    ``gap``, ``progress`` and ``deterministic`` are used when present. ``greedy=False``: the
    caller has already weighed the greedy against the hints (``solve`` passes its incumbent).
    ``stall``: as ``improve``'s; ``meta["large"]["ended"]`` says why the windows stopped.
    """
    t0 = time.perf_counter()
    objective = getattr(options, "objective", "makespan")
    time_limit = float(getattr(options, "time_limit", 60.0))
    cfg = LNSConfig(workers=int(getattr(options, "workers", 2) or 2),
                    seed=int(getattr(options, "seed", 0) or 0),
                    deterministic=bool(getattr(options, "deterministic", False)))
    bound = quick_bound(inst, objective)
    tracker = None
    if getattr(options, "progress", False):
        from zbsolve.solver.progress import Progress

        tracker = Progress(1.0, objective, echo=True, floor=bound)

    starts: list[tuple[float, str, Schedule]] = []
    given = _as_list(hints)
    if greedy and not any("variants_tried" in h.meta for h in given):  # no greedy among hints
        try:
            heur, heur_sim = heuristic_schedule(
                inst, objective,
                time_limit=None if cfg.deterministic else max(1.0, 0.2 * time_limit))
            starts.append((heur_sim.value(objective), "heuristic", heur))
        except GreedyDeadlock:  # the hints remain
            pass
    for h in given:
        try:
            sim = simulate(inst, h)
        except ScheduleError:
            continue
        if sim.feasible:
            starts.append((sim.value(objective), h.name, h))
    if not starts:  # no greedy schedule and no feasible hint: nothing to improve
        return None, None
    starts.sort(key=lambda x: x[0])
    value, name, first = starts[0]
    left = time_limit - (time.perf_counter() - t0)
    if left > 0.5:
        best, _, stats = improve(inst, first, objective, left, config=cfg, bound=bound,
                                 gap=float(getattr(options, "gap", 0.0) or 0.0), progress=tracker,
                                 stall=stall)
    else:
        best, stats = first, LNSStats()
    best.meta["large"] = {
        "start": name, "start_value": value, "quick_bound": bound,
        "candidates": [(n, v) for v, n, _ in starts], **stats.as_dict(),
        "wall": time.perf_counter() - t0,
    }
    return best, bound
