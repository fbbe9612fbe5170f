"""``solve(inst, options)``: the optimizer's front door.

Order of work, all inside one time budget (``budget.Budget``: ``time_limit`` covers the whole
call): reject impossible memory limits; bound the optimum (``bounds.analytic_bound``); evaluate
every hand-made schedule with the simulator, add the caller's hints, the I/W-split forms and
the greedy list scheduler (the serial schedule when nothing else fits), on overlap instances
the best few of them given overlapped F&B pairs (``pairing.pair_up``), and take the best one
as the incumbent (hint, with its pairs, and upper bound); on V placements with limits, raise
the bound by branching on the tip's memory state (``state_bound``); on devices with several
stages and many microbatches, solve the model with fewer microbatches and offer the repeats
of its steady state (``stretch``); run CP-SAT (or the large-instance method, whose windows hand the time
they cannot use to CP-SAT on the whole model: ``_hands_over``); then a second, short CP-SAT
phase that keeps the best step time and minimizes memory. Every phase's schedule is
re-simulated and the best by ``ranking.rank_key`` (step time, then memory) is kept,
so the result is never worse than any hint or phase, and every figure reported is the
simulator's.

The ``span`` objective is the longest per-device span, from the device's head (the earliest
the task graph lets its first op start, ``TaskGraph.device_heads``) to its last end: the
simulator, the model, the bounds and the exhaustive search all measure it so, and nothing pins
a device's first start.

Contract for ``method="large"`` (``zbsolve.solver.large``): a function
``solve_large(inst, options, hints: list[Schedule]) -> tuple[Schedule | None, float | None]``
returning its best schedule (any valid orders; re-simulated here) and a lower bound in instance
time units if it proved one (else None). ``options.time_limit`` is the time left.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
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
    serial_schedule,
)
from zbsolve.solver.budget import Budget, OutOfTime
from zbsolve.solver.model import (
    MEMORY_MODELS,
    OBJECTIVES,
    TimeScale,
    build_model,
    microbatch_relabelling,
    scaled_instance,
    whole_microbatch_relabelling,
)
from zbsolve.solver.progress import Progress, rel_gap
from zbsolve.solver.ranking import memory_key, rank_key

METHODS = ("auto", "exact", "large")
PAIRED_CANDIDATES, PAIRING_SECONDS = 2, 1.0  # overlap instances: candidates given F&B pairs
EXACT_MAX_OPS = 2500  # auto: above this many ops the monolithic model stalls on 2 cores
# The large method on devices with several stages, without pair or mode choices, up to
# HANDOVER_MAX_OPS ops (the largest whole model measured: V-Min / V-Half p = 16, m = 128) and
# given HANDOVER_MIN_SECONDS: windows that accept nothing in a whole pass (or stop early) hand
# the time left to the whole model, hinted with their schedule (``_hands_over``). The solve's
# own budget is compared: ``solve --time-limit 60`` gives it 60 s less loading and writing,
# which must qualify (at 60.0 it did not: twenty-first pass)
HANDOVER_MAX_OPS, HANDOVER_MIN_SECONDS = 12288, 50.0
TOL = 1e-9
BOUND_SHARE = 0.2  # of the budget, at most, for the analytic bound (else the quick bound)
HAND_MADE_SHARE = 0.3  # of the budget, at most, for the hand-made families and the hints
GREEDY_SHARE = 0.15  # of the budget, at most, for the greedy list scheduler
MEMORY_PHASE_SHARE = 0.25  # of the budget, at most, for the memory phase
MEMORY_PHASE_MIN = 1.0  # seconds the memory phase may take even after a quick first phase
# Devices with several stages (``_exact_phases``): a CP-SAT run whose gap is still above
# RELAX_GAP at RELAX_AT of the budget gives way to the one-device relaxations (RELAX_SHARE of
# the budget, at most) and a run with the bottleneck's order kept (BOTTLENECK_SHARE, at most).
RELAX_AT, RELAX_GAP, RELAX_SHARE, BOTTLENECK_SHARE = 0.4, 0.01, 0.25, 0.15
# Devices with several stages, exact method: the window search (``large.improve``) runs first
# for WINDOWS_SHARE of the budget, then CP-SAT starts from its schedule (``_window_phase``;
# not where one window would hold the whole model).
WINDOWS_SHARE = 1 / 6
STRETCH_SHARE = 1 / 2  # of the budget, for the reduced instances' solves (stretch.py)
STRETCH_FIRST = 2 / 3  # of that share, for the first (smallest) reduced instance
STRETCH_CANDIDATES = 64  # deterministic mode: stretches simulated (no clock may cut them)
# A proven reduced optimum with no good stretch: the same m' again with the next seed, while the
# share left is at least what that solve took (vhalf/p8-m32: 7 of 38 optima of m' = 12 stretch
# to the proven 198, the others to 199-277 or not at all; results/multichunk, fifteenth pass)
STRETCH_RETRIES = 2
UNPAIRED_SHARE = 1 / 4  # overlap instances: the instance without pairs first (``_unpaired_first``)
# Devices with several stages, exact method, wall clock, at most SWITCH_MAX_OPS ops: a CP-SAT
# run stuck at SWITCH_AT of the budget (``_stuck``) gives the rest to a run with the bound
# search (``_exact_phases``).
SWITCH_AT, SWITCH_MAX_OPS, STUCK_TOL = 0.25, 800, 1e-6
# ... a run that would reach SWITCH_AT less than SWITCH_LOOK of the budget after its start is
# not tested (as one that starts after it): a fraction of a second shows no search stuck
# (random-07: its run began 0.6 s before the quarter, was switched with its first schedule
# still to come, and ended unproven; twenty-sixth pass)
SWITCH_LOOK = 1 / 12
# Devices with several stages and limits, exact method, at most RELAX_FIRST_MAX_OPS ops: each
# device's one-device relaxation for at most RELAX_FIRST_SLICE seconds, RELAX_FIRST_SHARE of
# the budget in all, before the search (``_relax_first``)
RELAX_FIRST_SHARE, RELAX_FIRST_SLICE, RELAX_FIRST_MAX_OPS = 0.1, 1.0, 800
# Where the incumbent is within PAIR_NEAR of that bound before CP-SAT (by our reasoning, not
# measured on its own, a proof that waits for the bound rather than the schedule), the top
# device kept with its most overloaded partner, PAIR_SHARE of the budget (``_pair_near``)
PAIR_NEAR, PAIR_SHARE = 0.02, 0.15
# After the relaxations first and the windows, where the relaxations lifted the bound and the
# incumbent is not within the gap of it: a run with the bottleneck's order kept, for
# BOTTLENECK_FIRST_SHARE of the budget at most, before the whole model (``_bottleneck_first``)
BOTTLENECK_FIRST_SHARE = 0.05
# V placements with limits: the memory-state bound at the tip (``_state_phase``) for at most
# STATE_SHARE of the budget (its box search stops at STATE_CUT of that share, leaving the rest
# for the paths it computes first; deterministic: STATE_BOXES boxes)
STATE_SHARE, STATE_CUT, STATE_BOXES = 0.3, 0.9, 20_000
# ... and gives up after STATE_PATIENCE boxes at or below the analytic bound: on ZB-V's rows it
# rises above it within 57-225 boxes, on the V-Min / V-Half rows mostly never (vmin/p16-m32
# at 773, by 1; vmin/p8-m64 would spend 31 s to end at the analytic bound; 500 boxes take
# 0.1-0.3 s there; twenty-fifth pass)
STATE_PATIENCE = 500
# A whole-model CP-SAT run stops this much before the end of the budget (``finish_reserve``)
FINISH_PER_OP, FINISH_MAX = 2e-4, 0.6


@dataclass
class SolveOptions:
    time_limit: float = 60.0  # seconds for the whole solve (wall; deterministic: CP-SAT's)
    gap: float = 0.0  # relative gap at which to stop (CP-SAT's, and no memory phase once met)
    workers: int = 2
    seed: int = 0
    objective: str = "makespan"  # or "span" (longest per-device span: the ZB papers' metric)
    method: str = "auto"  # auto | exact | large
    progress: bool = False  # elapsed / incumbent / bound / gap lines on stderr
    memory_model: str = "cumulative"  # or "reservoir"
    symmetry: bool = True
    deterministic: bool = False  # time_limit in CP-SAT deterministic seconds; same answer anywhere
    memory_tiebreak: bool = True  # second CP-SAT phase: least memory at the best step time
    relax: bool = False  # exact method, multi-stage devices: the one-device relaxation phase
    windows: bool = True  # exact method, multi-stage devices: the window search before CP-SAT
    # exact method, multi-stage devices with limits, <= RELAX_FIRST_MAX_OPS ops: a short
    # one-device relaxation each before the search, for a bound above the analytic one
    relax_first: bool = True
    stretch: bool = True  # multi-stage devices, many microbatches: stretch.reduced_sizes
    # large method, multi-stage devices: the windows hand the time left to the whole model
    # after a pass that accepts nothing (``_hands_over``)
    handover: bool = True
    # exact method: CP-SAT's full-problem worker searches the lower bound (lb_tree_search;
    # cpsat.BOUND_SEARCH_PARAMS), for proofs the default search does not reach
    bound_search: bool = False
    # exact method, multi-stage devices, <= SWITCH_MAX_OPS ops: a search stuck at SWITCH_AT of
    # the limit (bound at the analytic one, nothing better than its hint) goes on with the
    # bound search (docs/solver.md, "The bound switch")
    bound_switch: bool = True
    # V placements with limits: the bound that branches on the tip's memory state, before the
    # stretch and the search (``_state_phase``)
    state_bound: bool = True
    # the relaxations first: a second slice with the shaving search for those not proven
    # (``relaxation.quick_bound``'s ``shave``; wall clock only)
    shave: bool = True
    # ... and what is left of their share for the open relaxation with the longest relaxed
    # schedule, in one run (``relaxation.quick_bound``'s ``rest``)
    relax_rest: bool = True
    # the relaxations first: where they lift the bound and the schedule is not at it, a run
    # with the bottleneck device's relaxed order kept before the search (``_bottleneck_first``)
    bottleneck_first: bool = True
    # overlap instances, exact method: the instance without pairs solved first, its schedule
    # then given pairs and used as the search's start (``_unpaired_first``)
    unpaired_first: bool = True
    cp_params: dict[str, Any] = field(default_factory=dict)  # extra CP-SAT parameters

    def check(self) -> None:
        """Reject bad options with the field name and the allowed values."""
        if not (isinstance(self.time_limit, (int, float)) and not isinstance(self.time_limit, bool)
                and math.isfinite(self.time_limit) and self.time_limit >= 0):
            raise ValueError(f"time_limit: expected seconds >= 0, got {self.time_limit!r}")
        if not (isinstance(self.gap, (int, float)) and 0 <= self.gap < 1):
            raise ValueError(f"gap: expected a relative gap in [0, 1), got {self.gap!r}")
        if not (isinstance(self.workers, int) and self.workers >= 1):
            raise ValueError(f"workers: expected an integer >= 1, got {self.workers!r}")
        if not (isinstance(self.seed, int) and 0 <= self.seed < 2**31):
            raise ValueError(f"seed: expected an integer in [0, 2**31), got {self.seed!r}")
        if self.bound_search and self.deterministic:
            # CP-SAT's deterministic (interleaved) search leaves lb_tree_search out: the flag
            # would do nothing there, so say so rather than run without it
            raise ValueError("bound_search: CP-SAT runs its bound search only in wall-clock "
                             "mode; drop --deterministic or --bound-search")
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
    lower_bound: float  # max(analytic, relaxed, cp-sat bound)
    analytic_bound: float
    cpsat_bound: float | None
    gap: float  # (objective_value - lower_bound) / objective_value
    solve_time: float
    baseline: str | None  # best feasible hand-made schedule (fastest, then least memory)
    baseline_value: float | None
    baselines: list = field(default_factory=list)  # every BaselineResult, for tables
    history: list[tuple[float, float, float]] = field(default_factory=list)
    # the best bound found before the search (the memory-state bound, the one-device or pair
    # relaxations), where it is above the analytic one
    relaxed_bound: float | None = None


@dataclass
class _Candidate:
    name: str
    schedule: Schedule
    sim: SimResult


class _Best:
    """The best schedule of every phase so far, by ``rank_key`` (never lost)."""

    def __init__(self, inst: Instance, objective: str):
        self.inst, self.objective = inst, objective
        self.all: list[_Candidate] = []
        self.phases: list[dict[str, Any]] = []

    def offer(self, cand: _Candidate, phase: str) -> None:
        self.all.append(cand)
        self.phases.append({"phase": phase, "name": cand.name,
                            "value": cand.sim.value(self.objective),
                            "memory": list(memory_key(self.inst, cand.sim))})

    def key(self, cand: _Candidate) -> tuple:
        return rank_key(self.inst, cand.sim, self.objective)

    def best(self) -> _Candidate:
        return min(self.all, key=self.key)

    def ranked(self) -> list[_Candidate]:
        return sorted(self.all, key=self.key)


def hand_made(inst: Instance, budget: Budget | None = None, until: float = math.inf) -> list:
    """Every registered hand-made schedule, simulated, within the budget's share.

    A generator that produces an invalid schedule is listed as not applicable with the reason,
    instead of taking the solver down with it; one that runs out of time is listed as not
    evaluated (it would only have been a hint). ``until``: the budget's elapsed seconds by
    which this phase ends.
    """
    from zbsolve.baselines import NAMES, BaselineResult, evaluate_all

    budget = budget or Budget(math.inf, deterministic=True)
    out = []
    for name in NAMES:
        left = until - budget.elapsed()
        try:
            with budget.alarm(left):
                out += evaluate_all(inst, (name,))
        except ScheduleError as exc:
            out.append(BaselineResult(name, None, None, f"invalid schedule: {exc}"))
        except OutOfTime:
            out.append(BaselineResult(name, None, None,
                                      "not evaluated: the time limit was spent"))
    return out


def _judged(inst: Instance, found: Schedule | None, info: dict[str, Any]) -> Schedule | None:
    """The solver's schedule, or None where the simulator rejects it: with memory modes the
    copies run beside compute, so a solution's rows can re-time (ASAP) differently from the
    model; a rejected answer leaves the incumbent (the reason goes into ``info``)."""
    if found is None or not inst.offers_modes:
        return found
    try:
        validate(inst, found)
    except ScheduleError as exc:
        info["rejected"] = f"the solver's orders failed the simulator: {exc}"
        return None
    return found


def best_hand_made(inst: Instance, objective: str, baselines: list):
    """The fastest hand-made schedule that fits, the one with least memory among equals."""
    fits = [r for r in baselines if r.applicable and r.result.feasible]
    return min(fits, key=lambda r: rank_key(inst, r.result, objective), default=None)


def _greedy(inst: Instance, objective: str, budget: Budget) -> list[_Candidate]:
    """The memory-aware greedy list scheduler: it covers placements and budgets no hand-made
    family does. Deterministic mode runs every variant. It schedules keep only: on an
    instance with memory modes it runs on the keep form, where keep's minimum fits, and on
    the recompute proxy (``zbsolve.solver.mode_greedy``), whose orders get R jobs; the two
    share the greedy's allowance (GREEDY_SHARE of the budget)."""
    from zbsolve.solver.mode_greedy import recompute_fewest, recompute_proxy

    keep = inst.with_modes(("keep",)) if inst.offers_modes else inst
    proxy = recompute_proxy(inst)
    seconds = budget.share(GREEDY_SHARE) / (2 if proxy is not None else 1)
    out = []
    found = _greedy_orders(keep, objective, budget, seconds)
    if found is not None:
        sched, sim = found
        sim = simulate(inst, sched) if keep is not inst else sim
        if sim.feasible:
            out.append(_Candidate(sched.name, sched, sim))
    if proxy is None:
        return out
    t0 = budget.elapsed()
    orders = _greedy_orders(proxy, objective, budget, seconds)
    # deterministic mode: no clock decides anything (the alarm below is then a no-op too)
    rest = math.inf if budget.deterministic else seconds - (budget.elapsed() - t0)
    if orders is None or rest <= 0:
        return out
    try:
        with budget.alarm(rest):  # alarms do not nest: the greedy's own has ended
            found = recompute_fewest(inst, orders[0])
    except OutOfTime:
        found = None
    if found is not None:
        out.append(_Candidate(found[0].name, *found))
    return out


def _greedy_orders(inst: Instance, objective: str, budget: Budget, seconds: float
                   ) -> tuple[Schedule, SimResult] | None:
    """The best greedy variant on ``inst`` within ``seconds``, or None."""
    from zbsolve.solver.bounds import InfeasibleMemoryError
    from zbsolve.solver.heuristic import GreedyDeadlock, heuristic_schedule

    stop_trying = None if budget.deterministic else max(0.0, 0.5 * seconds)
    try:
        with budget.alarm(seconds):
            return heuristic_schedule(inst, objective, time_limit=stop_trying)
    except OutOfTime:
        return None
    except InfeasibleMemoryError:  # below what keep needs; the modes' candidates remain
        return None
    except GreedyDeadlock:  # the other candidates remain (the serial one always fits)
        return None


def _candidates(inst: Instance, objective: str, hints: list[Schedule], baselines: list,
                budget: Budget, until: float, best: _Best, floor: float,
                within: float) -> None:
    """Offer every memory-feasible starting point: hand-made, caller hints, the I/W-split
    forms, the greedy, and the serial schedule (the witness that always fits; simulated only
    when nothing else fits on instances too large to spend the time on it).

    The greedy is skipped when a hand-made schedule or hint is already within ``within`` of
    the lower bound ``floor``: nothing can beat it by more, and on the one-chunk ZB cases
    the greedy's variants were most of the time to a proof that the bound had already made
    (the memory phase still looks for less memory at that step time)."""
    start = [_Candidate(r.name, r.schedule, r.result) for r in baselines
             if r.applicable and r.result.feasible]
    for c in start:
        best.offer(c, "hand-made")
    for sched in hints:  # the caller's: bad ones are the caller's error, so they raise
        sim = simulate(inst, sched)
        if sim.feasible:
            best.offer(_Candidate(sched.name, sched, sim), "hint")
    try:
        with budget.alarm(until - budget.elapsed()):
            for c in start:
                split = split_backward(c.schedule)
                if split is not c.schedule:
                    sim = simulate(inst, split)
                    if sim.feasible:
                        best.offer(_Candidate(split.name, split, sim), "hand-made")
    except OutOfTime:
        pass
    if not best.all or rel_gap(best.best().sim.value(objective), floor) > within:
        for greedy in _greedy(inst, objective, budget):
            best.offer(greedy, "greedy")
    if not best.all or TaskGraph(inst).count() <= EXACT_MAX_OPS:
        serial = serial_schedule(inst)
        best.offer(_Candidate(serial.name, serial, simulate(inst, serial)), "serial")
    if inst.overlap is not None:
        _paired(inst, budget, until, best)


def _paired(inst: Instance, budget: Budget, until: float, best: _Best) -> None:
    """Overlap instances: the best few candidates without pairs, given overlapped F&B pairs
    where the simulator says they help (``pairing.pair_up``). Each gets PAIRING_SECONDS, cut
    to what is left of the phase; in deterministic mode nothing is cut by the clock, so each
    runs to its fixpoint (no pair left that helps)."""
    from zbsolve.solver.pairing import pair_up

    for c in [c for c in best.ranked() if not c.schedule.has_pairs][:PAIRED_CANDIDATES]:
        seconds = math.inf if budget.deterministic else min(PAIRING_SECONDS,
                                                            until - budget.elapsed())
        if seconds <= 0:
            return
        sched, sim = pair_up(inst, c.schedule, time_limit=seconds)
        if sched.has_pairs and sim.feasible:
            best.offer(_Candidate(sched.name, sched, sim), "paired")


def _bound(inst: Instance, objective: str, budget: Budget, info: dict[str, Any]) -> float:
    """The analytic lower bound, or a cheap one if it does not fit its share of the time."""
    try:
        with budget.alarm(budget.share(BOUND_SHARE)):
            return analytic_bound(inst, objective)
    except OutOfTime:
        info["bound"] = "work only (the analytic bound did not fit its share of the time limit)"
        graph = TaskGraph(inst)  # least work: an op may run shorter inside an overlapped pair
        return max(graph.device_min_work(d) for d in range(inst.devices))


def solve(inst: Instance, options: SolveOptions | None = None,
          hints: list[Schedule] | tuple[Schedule, ...] = ()) -> SolveResult:
    """Optimize a schedule for ``inst`` (see the module docstring); never worse than a hint."""
    options = options or SolveOptions()
    options.check()
    budget = Budget(float(options.time_limit), options.deterministic)
    check_memory(inst)
    objective = options.objective
    n_ops = TaskGraph(inst).count()
    method = options.method
    if method == "auto":
        method = _auto_method(n_ops)
    info: dict[str, Any] = {"method": method, "ops": n_ops}
    if method == "large" and inst.offers_modes:
        info["note_modes"] = ("the large-instance method keeps the memory modes of the best "
                              "starting schedule (it reorders recomputes; a schedule with "
                              "offload copies is kept as it is); the exact model chooses them")
    analytic = _bound(inst, objective, budget, info)
    until = budget.elapsed() + budget.share(HAND_MADE_SHARE)
    baselines = hand_made(inst, budget, until)
    best_hand = best_hand_made(inst, objective, baselines)
    best = _Best(inst, objective)
    within = max(TOL, options.gap)
    _candidates(inst, objective, list(hints), baselines, budget, until, best, analytic, within)
    inc = best.best()
    progress = Progress(1.0, objective, echo=options.progress, floor=analytic)
    progress.note(inc.sim.value(objective), analytic, f"hint: {inc.name}")

    cp_bound: float | None = None
    ran = False
    floor = analytic  # the best bound before the search
    singles: list[Any] = []  # the relaxations first (``relaxation.Relaxation``)

    def lift(bound: float | None, what: str) -> None:
        # CP-SAT's runs stop at a schedule within --gap of it (``Progress.goal``); it is not
        # put in their model, where it slowed their own bound (docs/solver.md)
        nonlocal floor
        if bound is not None and bound > floor:
            floor = progress.floor = bound
            progress.goal = bound / (1 - options.gap)
            progress.note(best.best().sim.value(objective), floor, what)

    if options.state_bound and rel_gap(inc.sim.value(objective), floor) > within:
        lift(_state_phase(inst, options, budget, info, progress, inc.sim.value(objective),
                          within), "the memory-state bound")
    if options.stretch and rel_gap(inc.sim.value(objective), floor) > within:
        ran = _stretch_phase(inst, options, best, budget, progress, info, floor)
        inc = best.best()
    if (options.unpaired_first and inst.overlap is not None and method == "exact"
            and not any(r.applicable and r.result.feasible and r.schedule.has_pairs
                        for r in baselines)
            and rel_gap(inc.sim.value(objective), floor) > within):
        ran = _unpaired_first(inst, options, best, budget, progress, info, floor) or ran
        inc = best.best()
    if (method == "exact" and rel_gap(inc.sim.value(objective), floor) > within
            and _relaxes_first(inst, options, n_ops)):
        lifted, singles = _relax_first(inst, options, budget, info, inc.sim.value(objective),
                                       within)
        lift(lifted, "one-device relaxations")
    named = ("the analytic lower bound" if floor == analytic
             else "the memory-state bound" if floor == info.get("state_bound", {}).get("value")
             else "the bound of the one-device relaxations")
    proven = rel_gap(inc.sim.value(objective), floor) <= within
    if proven:
        info["proof_time"] = budget.elapsed()
        what = "a stretched schedule" if inc.name.startswith("stretch-") else "the hint"
        info["note"] = (f"{what} meets {named}: optimal, solver not run"
                        if rel_gap(inc.sim.value(objective), floor) <= TOL
                        else f"{what} is within the requested gap: solver not run")
    elif budget.cp_left() <= 0:
        info["note"] = "no time left after the hand-made schedules; solver not run"
    elif method == "large":
        from zbsolve.solver.large import GAVE_UP, solve_large

        sub = dataclasses.replace(options, time_limit=budget.cp_left())
        hand_over = options.handover and _hands_over(inst, n_ops, options.time_limit)
        if options.bound_search and not hand_over:
            info["bound_search"] = "not used: the large method runs no whole-model CP-SAT here"
        found, cp_bound = solve_large(inst, sub, [inc.schedule], greedy=False,
                                      stall=hand_over)
        windows = found.meta.get("large") if found is not None else None
        info["large"] = windows
        ran = ran or found is not None
        if found is not None:
            best.offer(_Candidate(found.name, found, validate(inst, found)), "large")
        if (hand_over and windows is not None and windows["ended"] in GAVE_UP
                and rel_gap(best.best().sim.value(objective), floor) > within
                and budget.cp_left() > 0):
            info["handover"] = {"at": budget.elapsed(), "windows": windows["ended"]}
            progress.note(best.best().sim.value(objective), floor,
                          f"windows {windows['ended']}: the whole model")
            exact_ran, exact_bound = _exact_phases(inst, options, best, budget, progress, info)
            ran = ran or exact_ran
            cp_bound = _max_bound([cp_bound, exact_bound])
            if info.get("cp_status") == "OPTIMAL":
                info["proof_time"] = budget.elapsed()
    else:
        if options.windows and _window_phase(inst, options, best, budget, progress, info,
                                             floor, within):
            info["proof_time"] = budget.elapsed()
            info["note"] = f"the window search met {named}: CP-SAT not run"
        else:
            lift(_pair_near(inst, options, budget, info, singles, best.best().sim.value(objective),
                            floor, within), "a pair relaxation")
            first = (options.bottleneck_first
                     and rel_gap(best.best().sim.value(objective), floor) > within
                     and _bottleneck_first(inst, options, best, budget, progress, info,
                                           singles, analytic, floor))
            ran = ran or first
            if rel_gap(best.best().sim.value(objective), floor) > within:
                exact_ran, cp_bound = _exact_phases(inst, options, best, budget, progress, info)
                ran = ran or exact_ran
            elif first:
                info["note"] = ("the run with the bottleneck's order meets the bound: "
                                "the whole model not run")
            else:
                info["note"] = "a pair relaxation proves the best schedule: CP-SAT not run"
        if (info.get("cp_status") == "OPTIMAL"
                or rel_gap(best.best().sim.value(objective), floor) <= within):
            info["proof_time"] = budget.elapsed()
    bound = max(floor, cp_bound if cp_bound is not None else -math.inf)
    relaxed = floor if floor > analytic else None
    if options.memory_tiebreak and method == "exact":
        if options.gap > 0 and rel_gap(best.best().sim.value(objective), bound) <= options.gap:
            # the caller asked to stop at this gap, so the tie-break does not add its share
            info["memory_phase"] = "not run: the requested gap is reached"
        else:
            _memory_phase(inst, options, best, budget, info)

    chosen = best.best()
    source = _source(best, chosen)
    value = chosen.sim.value(objective)
    lower = min(bound, value)
    gap = rel_gap(value, lower)
    if gap <= TOL:
        status = "optimal"
    else:
        status = "feasible" if ran else "fallback"
    elapsed = budget.elapsed()
    progress.note(value, lower, f"{status} ({source})")

    sched = Schedule([list(r) for r in chosen.schedule.orders], name=f"zbsolve-{objective}",
                     starts=dict(chosen.sim.start))
    base_value = best_hand.result.value(objective) if best_hand else None
    fullest, total = memory_key(inst, chosen.sim)
    sched.meta = {
        "instance": inst.to_dict(),  # so exports of this file need no --instance
        "status": status,
        "source": source,
        "objective": objective,
        "objective_value": value,
        "figures": chosen.sim.summary(),
        "memory": {"fullest": fullest, "sum_of_peaks": total},
        "bounds": {"lower": lower, "analytic": analytic, "relaxed": relaxed,
                   "cpsat": cp_bound, "gap": gap},
        "solve_time": elapsed,
        "baseline": None if best_hand is None else {
            "name": best_hand.name, "value": base_value, "figures": best_hand.result.summary()},
        "options": asdict(options),
        "solver": {**info, "phases": best.phases, "cp_dtime": budget.cp_dtime},
    }
    return SolveResult(
        schedule=sched, sim=chosen.sim, status=status, objective_value=value,
        lower_bound=lower, analytic_bound=analytic, cpsat_bound=cp_bound, gap=gap,
        solve_time=elapsed, baseline=best_hand.name if best_hand else None,
        baseline_value=base_value, baselines=baselines, history=progress.history,
        relaxed_bound=relaxed,
    )


def _source(best: _Best, chosen: _Candidate) -> str:
    """Where the returned schedule came from: ``exact``, ``large``, ``memory`` (the second
    phase) or ``hint:<name>``."""
    phase = next(p["phase"] for c, p in zip(best.all, best.phases) if c is chosen)
    return phase if phase in ("exact", "large", "memory") else f"hint:{chosen.name}"


def _step_slack(si: Instance) -> int:
    """How far past every device's end the step's implicit jobs may end (model units): a span
    leaves them out (post-validation's check chain), so the span horizon makes room for their
    longest chain. 0 without the step's jobs (the model stays as it was)."""
    graph = TaskGraph(si)
    if not graph.has_step:
        return 0
    implicit = list(graph.implicit_ops())
    return int(sum(graph.duration(op) for op in implicit) + si.comm * len(implicit))


def _model_hint(si: Instance, sched: Schedule, options: SolveOptions
                ) -> tuple[dict[Op, int], list[Pair], int | None, int | None]:
    """A schedule as a CP-SAT hint on the scaled instance: (integer starts, its overlapped
    pairs, an upper bound on the objective in model units or None, a horizon or None).

    The makespan or span of an ASAP-timed feasible order is attainable in the model, so it is
    a safe upper bound; for makespan it is also the horizon, for span every op ends by the
    largest device head + the span (spans run from the heads, ``TaskGraph.device_heads``).
    """
    hint_sched = split_backward(sched)
    hint_sim = simulate(si, hint_sched)  # integer start times
    graph = TaskGraph(si)
    starts, pairs = _model_starts(hint_sched, hint_sim, options.symmetry,
                                  si if graph.open else None, graph.absorbable)
    ub, horizon = None, None
    if hint_sim.feasible and options.objective == "makespan":
        ub = int(round(hint_sim.makespan))
    elif hint_sim.feasible:
        ub = int(round(hint_sim.max_span))
        horizon = int(round(max(graph.device_heads()))) + ub + _step_slack(si)
    return {k: int(round(v)) for k, v in starts.items()}, pairs, ub, horizon


def _model_starts(sched: Schedule, sim: SimResult, symmetry: bool,
                  open_view: Instance | None = None, absorbable: frozenset[int] = frozenset()
                  ) -> tuple[dict[Op, float], list[Pair]]:
    """The incumbent as the model sees it: every op's start in the split form (a pair's fused
    B becomes its I and W, both at the pair's start), and its pairs; relabelled into
    microbatch order when the model breaks that symmetry (``open_view``: the instance whose
    memory modes the model chooses, where whole microbatches are relabelled; ``absorbable``:
    the stages whose Ws keep their I's label, ``TaskGraph.absorbable``)."""
    starts = dict(sim.start)
    pairs = [e for row in sched.orders for e in row if isinstance(e, Pair)]
    for pair in pairs:
        if pair.second.kind == Kind.B:
            t = starts.pop(pair.second)
            starts[pair.second._replace(kind=Kind.I)] = starts[pair.second._replace(kind=Kind.W)] = t
    if not symmetry:
        return starts, pairs
    if open_view is not None:
        relabel = whole_microbatch_relabelling(open_view, starts)
        return ({relabel[op]: t for op, t in starts.items()},
                [Pair(relabel.get(p.first, p.first), relabel.get(p.second, p.second))
                 for p in pairs])
    relabel = microbatch_relabelling(starts, absorbable)
    starts = {relabel[op]: t for op, t in starts.items()}

    def moved(op: Op) -> Op:
        if op.kind == Kind.B:
            return relabel[op._replace(kind=Kind.I)]._replace(kind=Kind.B)
        return relabel[op]

    return starts, [Pair(moved(p.first), moved(p.second)) for p in pairs]


def finish_reserve(n_ops: int) -> float:
    """Wall seconds a whole-model CP-SAT run leaves at the end of the budget, for CP-SAT to
    stop and for the solve to decode and simulate its schedule: FINISH_PER_OP per op, at most
    FINISH_MAX. Why: CP-SAT answers its time limit late on large models (the exact method on
    V-Min files, one run: 0.06 s at 768 ops, 0.44 s at 3,072, 0.12 s at 6,144, 0.02 s at
    12,288; reading the answer takes up to 0.1 s more), which ran ``solve --time-limit 60``
    to 60.84 s (results/multichunk, twenty-first pass)."""
    return min(FINISH_MAX, FINISH_PER_OP * n_ops)


def _run(sm, options: SolveOptions, budget: Budget, seconds: float, callback=None,
         bound_callback=None, checkpoint: tuple[float, Callable[[], bool]] | None = None,
         bound_search: bool = False):
    """Solve a built model for ``seconds`` of the budget; returns (solver, status code).

    ``checkpoint`` = (wall seconds, predicate): at that moment the search stops if the
    predicate holds (the relaxation phase then takes over, ``_solve_exact``).
    ``bound_search``: the full-problem worker searches the lower bound (``BOUND_SEARCH_PARAMS``)."""
    from zbsolve.solver.cpsat import BOUND_SEARCH_PARAMS, EXACT_MODEL_PARAMS, new_solver, run

    search = BOUND_SEARCH_PARAMS if bound_search else {}
    # the caller's seconds were counted before it built the model, which takes wall time too
    # (about a second at 12,000 ops): the run gets no more than is left of the limit, less
    # what it takes CP-SAT to stop and the solve to read its answer (``finish_reserve``)
    seconds = min(seconds, budget.cp_left() - (0.0 if budget.deterministic
                                               else finish_reserve(sm.stats.get("ops", 0))))
    solver = new_solver(seconds, workers=options.workers, seed=options.seed,
                        deterministic=options.deterministic, gap=options.gap,
                        extra={**EXACT_MODEL_PARAMS, **search, **options.cp_params})
    if bound_callback is not None:
        solver.best_bound_callback = bound_callback
    timer = None
    if checkpoint is not None:
        at, stop = checkpoint
        timer = threading.Timer(max(0.0, at), lambda: stop() and solver.stop_search())
        timer.daemon = True
        timer.start()
    try:
        code = run(solver, sm.model, callback)
    finally:
        if timer is not None:
            timer.cancel()
    budget.cp_dtime += solver.deterministic_time
    return solver, code


@dataclass
class _Exact:
    """What one exact CP-SAT run gave: its schedule (or None), its valid bound in instance
    units (or None), its raw bound in model units, and whether it was stopped at its
    checkpoint (for the relaxation phase or the bound switch)."""

    schedule: Schedule | None
    bound: float | None
    raw_bound: int
    optimal: bool
    stopped: bool


def _far(progress: Progress) -> bool:
    """The relaxation phase's test at its checkpoint: CP-SAT's gap is still above RELAX_GAP."""
    return bool(progress.history) and rel_gap(*progress.history[-1][1:]) > RELAX_GAP


def _stuck(progress: Progress) -> bool:
    """The bound switch's test: far (``_far``), CP-SAT's bound has not left the analytic one
    (``Progress.floor``) and its search has found nothing better than its first solution (the
    hint). A bound that moves may still prove, and a search that still improves the schedule
    may still close the gap from above (random-29, random-25: twelfth pass). Only this run's
    solutions count: an earlier run's (the bottleneck's order first) improved on its own."""
    values = [value for _, value, _ in progress.history[progress.run_start:]]
    if not values or not _far(progress):
        return False
    return (progress.history[-1][2] <= progress.floor * (1 + STUCK_TOL)
            and min(values) >= values[0] * (1 - STUCK_TOL))


def _solve_exact(inst: Instance, options: SolveOptions, inc: _Candidate, budget: Budget,
                 progress: Progress, info: dict[str, Any], scale: TimeScale, *,
                 seconds: float, lower: int = 0, order: Sequence[Sequence[Op]] = (),
                 checkpoint: tuple[float, Callable[[Progress], bool]] | None = None,
                 bound_search: bool | None = None, label: str = "exact") -> _Exact:
    """One monolithic CP-SAT run hinted with the incumbent (``order``: device orders it must
    keep; ``lower``: a bound proven elsewhere, model units). With ``checkpoint`` = (wall
    seconds, test) the run stops there if the test holds (``_far``, ``_stuck``).
    ``bound_search``: None follows ``options.bound_search``."""
    from ortools.sat.python import cp_model

    built = budget.elapsed()
    si = scaled_instance(inst, scale)
    hint, pairs, ub, horizon = _model_hint(si, inc.schedule, options)
    sm = build_model(inst, options.objective, upper_bound=ub, horizon=horizon,
                     memory_model=options.memory_model, symmetry=options.symmetry, scale=scale,
                     order=order, lower_bound=lower)
    if not order:  # a kept order usually contradicts the incumbent: no hint then
        sm.add_hint(hint, pairs)
    info.setdefault("model", sm.stats)
    # the longest build so far: what a later phase's model of the same ops will take too
    info["build_seconds"] = max(info.get("build_seconds", 0.0), budget.elapsed() - built)
    progress.unit = float(scale.time)
    stopped = [False]

    def stop() -> bool:
        stopped[0] = checkpoint[1](progress)  # (called only with a checkpoint)
        return stopped[0]

    at = None if checkpoint is None else (checkpoint[0], stop)
    if bound_search is None:
        bound_search = options.bound_search
    bound_search = bound_search and not order  # a kept order is for search
    progress.bounds_hold = not order  # a kept order's bound holds only with the order
    progress.run_start = len(progress.history)
    try:
        solver, code = _run(sm, options, budget, seconds, progress, progress.on_bound, at,
                            bound_search=bound_search)
    finally:
        progress.bounds_hold = True
    info.setdefault("cp_runs", []).append({
        "phase": label, "start": built, "status": solver.status_name(code),
        "wall": solver.wall_time,
        "dtime": solver.deterministic_time, "stopped": stopped[0],
        "bound_search": bound_search})
    if not order:  # a run with a kept order proves nothing about the instance
        info.update(cp_status=solver.status_name(code), cp_wall=solver.wall_time,
                    cp_dtime=solver.deterministic_time)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Exact(None, None, lower, False, stopped[0])
    raw = int(round(solver.best_objective_bound))
    info["cp_objective"] = solver.objective_value / scale.time
    return _Exact(Schedule(sm.entries(solver), name=f"cpsat-{options.objective}"),
                  _instance_bound(raw, scale), raw, code == cp_model.OPTIMAL, stopped[0])


def _instance_bound(raw: float, scale: TimeScale) -> float | None:
    """A bound of the scaled model in instance units. Rounded durations are at most
    (1 + time_error) times the true ones, so the rounded optimum is at most (1 + time_error)
    times the true optimum: divide by it. None where memory was rounded (a stricter model)."""
    if not scale.memory_exact:
        return None
    return raw / scale.time / (1.0 + scale.time_error)


def _exact_phases(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                  progress: Progress, info: dict[str, Any]) -> tuple[bool, float | None]:
    """The exact method: CP-SAT on the whole model. With ``options.relax``, on instances whose
    devices hold several stages, a search still far from its bound at ``RELAX_AT`` of the
    budget gives way to the one-device relaxations (``relaxation.py``: a stronger bound, and
    the bottleneck device's order), then a run with the bottleneck's order kept, then CP-SAT
    again from the best schedule with the stronger bound (docs/solver.md, "One-device
    relaxations"). Every phase's schedule is offered to ``best``. A run whose schedule meets
    ``progress.goal`` (``_relax_first``) stops there, and so do the phases.
    Returns (whether CP-SAT ran, the best valid bound in instance units or None)."""
    from zbsolve.solver import relaxation

    scale = TimeScale.choose(inst)
    info.update(scale=asdict(scale))
    relax = bool(options.relax and options.symmetry and relaxation.candidates(inst)
                 and relaxation.applies(inst) is None)
    deterministic = options.deterministic
    switch = not relax and _switches(inst, options, info["ops"])
    first = budget.cp_left()
    checkpoint = None
    if relax:
        at = RELAX_AT * budget.limit - budget.elapsed()
        if deterministic:
            first = min(first, max(0.0, RELAX_AT * budget.limit - budget.cp_dtime))
        elif at < first:
            checkpoint = (at, _far)
    elif switch:
        at = _switch_at(budget.elapsed(), budget.limit)
        if at is not None and at < first:
            checkpoint = (at, _stuck)
    res = _Exact(None, None, 0, False, False)
    if first > 0:  # (deterministic, RELAX_AT = 0: straight to the relaxations)
        res = _solve_exact(inst, options, best.best(), budget, progress, info, scale,
                           seconds=first, checkpoint=checkpoint)
        _offer_exact(inst, best, res, info, "exact")
    bounds = [res.bound]
    ran = res.schedule is not None
    if progress.reached:
        return ran, _max_bound(bounds)
    if switch and res.stopped and budget.cp_left() > 0:
        progress.note(best.best().sim.value(options.objective), _max_bound(bounds) or 0.0,
                      "bound stuck: bound search")
        res = _solve_exact(inst, options, best.best(), budget, progress, info, scale,
                           seconds=budget.cp_left(), lower=res.raw_bound, bound_search=True,
                           label="bound-search")
        _offer_exact(inst, best, res, info, "bound-search")
        return ran or res.schedule is not None, _max_bound([*bounds, res.bound])
    go_on = relax and not res.optimal and (res.stopped or deterministic)
    if not go_on or budget.cp_left() <= 0:
        return ran, _max_bound(bounds)
    lower = res.raw_bound
    if res.stopped or rel_gap(best.best().sim.value(options.objective),
                              _max_bound(bounds) or 0.0) > RELAX_GAP:
        lower, order = _relaxations(inst, options, best, budget, info, scale, lower)
        bounds.append(_instance_bound(lower, scale))
        progress.note(best.best().sim.value(options.objective), _max_bound(bounds) or 0.0,
                      "one-device relaxations")
        if order and budget.cp_left() > 0:
            res = _solve_exact(inst, options, best.best(), budget, progress, info, scale,
                               seconds=min(budget.cp_left(), BOTTLENECK_SHARE * budget.limit),
                               order=[order], label="bottleneck")
            _offer_exact(inst, best, res, info, "bottleneck")  # its bound holds only with the order
    if budget.cp_left() > 0:
        res = _solve_exact(inst, options, best.best(), budget, progress, info, scale,
                           seconds=budget.cp_left(), lower=lower, label="exact-again")
        _offer_exact(inst, best, res, info, "exact-again")
        bounds.append(res.bound)
        ran = ran or res.schedule is not None
    return ran, _max_bound(bounds)


def _auto_method(n_ops: int) -> str:
    """The method ``auto`` picks: exact up to EXACT_MAX_OPS ops, large above (which, on devices
    with several stages, hands the time its windows cannot use to the whole model:
    ``_hands_over``)."""
    return "exact" if n_ops <= EXACT_MAX_OPS else "large"


def _hands_over(inst: Instance, n_ops: int, time_limit: float) -> bool:
    """Whether the large method's windows give way to the whole model once a whole pass of
    them accepts nothing, or they stop early (``large.LNSStats.gave_up``): devices with several
    stages, no overlapped pairs or memory modes to choose, at most HANDOVER_MAX_OPS ops, a
    budget (``time_limit``) of at least HANDOVER_MIN_SECONDS, set below 60 so that a command's
    ``--time-limit 60``, less what it keeps for loading and writing, qualifies.

    Why: on some such instances the windows keep finding better orders for the whole limit
    (an explicit snake, v = 3, p = 8, m = 48: 8907.74 -> 7318.47 in 120 s; Chimera p = 8,
    m = 128), and CP-SAT on the whole model from their early schedule loses to them (8574.25,
    6004.21); on others a pass of them accepts nothing (the V rows at p = 16: 182 windows in
    20 s, none accepted) while the whole model, hinted with the same start, improves it (V-Min
    p = 16, m = 32: 251 -> 245 in 120 s; V-Half p = 16, m = 64 proven at 402). Which kind an
    instance is shows in the windows' own progress, so they decide (results/multichunk,
    nineteenth and twentieth passes). Not with pairs or modes to choose: their whole model is
    larger (DualPipeV p = 16, m = 32, F&B 0.8, 3,072 ops: no schedule in 89 s); not measured
    with modes. Why the size: the largest whole model measured (V-Min p = 16, m = 128). Why
    the time: CP-SAT's first steps on a model of 6,000 ops cannot be interrupted (1-s runs
    with the hint took up to 2.5 s), which a short limit would feel, and at 20 s the tenth pass
    found the same schedules either way."""
    return (inst.several_stages_per_device and inst.overlap is None and not inst.offers_modes
            and n_ops <= HANDOVER_MAX_OPS and time_limit >= HANDOVER_MIN_SECONDS)


def _state_phase(inst: Instance, options: SolveOptions, budget: Budget, info: dict[str, Any],
                 progress: Progress, incumbent: float, within: float) -> float | None:
    """The memory-state bound at the V's tip (``state_bound``) for STATE_SHARE of the budget
    (deterministic: STATE_BOXES boxes), stopping once it proves ``incumbent`` within
    ``within`` or, after STATE_PATIENCE boxes, while it is no higher than the analytic bound;
    None where it does not apply, is too large or does not fit its share.

    Why before the stretch and the search: on ZB-V's rows the analytic bound is 2-6 % below
    ZB-V and the state bound meets it (6.2B, p = 16: 4,411 boxes, 2-3 s), so the hint is
    proven and nothing else runs (docs/solver.md, "Branching on a forward's memory state")."""
    from zbsolve.solver import state_bound

    if state_bound.applies(inst) is not None or state_bound.v_tip(inst) is None:
        return None
    seconds = budget.share(STATE_SHARE)
    deadline = None if budget.deterministic else time.monotonic() + STATE_CUT * seconds
    try:  # the deadline is read between boxes; the alarm cuts the paths computed first
        with budget.alarm(seconds):
            got = state_bound.state_bound(inst, options.objective,
                                          target=incumbent * (1 - within),
                                          boxes=STATE_BOXES, deadline=deadline,
                                          floor=progress.floor, patience=STATE_PATIENCE,
                                          report=lambda v, n: progress.note(
                                              incumbent, max(v, progress.floor),
                                              f"the memory-state bound, {n} boxes"))
    except OutOfTime:
        info["state_bound"] = {"note": "its paths did not fit its share of the time limit"}
        return None
    if got is None:
        info["state_bound"] = {"note": f"more than {state_bound.MAX_CELLS} path cells"}
        return None
    info["state_bound"] = {"value": got.value, "exact": got.exact, "boxes": got.boxes,
                           "seconds": got.seconds}
    return got.value


def _relaxes_first(inst: Instance, options: SolveOptions, n_ops: int) -> bool:
    """Whether the solve starts with each device's relaxation (``_relax_first``): asked for, at
    most RELAX_FIRST_MAX_OPS ops (the range measured: the random families' instances; above
    it a second per device was not tried) and a device with several stages and a limit that
    the relaxation phase accepts (``relaxation.applies``, ``candidates``)."""
    from zbsolve.solver import relaxation

    return (options.relax_first and n_ops <= RELAX_FIRST_MAX_OPS
            and bool(relaxation.candidates(inst)) and relaxation.applies(inst) is None)


def _relax_first(inst: Instance, options: SolveOptions, budget: Budget, info: dict[str, Any],
                 incumbent: float, within: float) -> tuple[float | None, list[Any]]:
    """Each candidate device's relaxation for a short slice (``relaxation.quick_bound``), until
    their bound proves ``incumbent`` within ``within``; returns their best bound in instance
    units (None where it is not valid there: rounded memory, ``_instance_bound``) and the
    relaxations.

    Why: one-device relaxations see a device's memory and stage order together, which the
    analytic bound cannot, and most are proven in under a second; a bound that is right from
    the start lets the window search or CP-SAT's first incumbent at the optimum end the solve,
    where CP-SAT's own bound may take much of the limit to get there (random-18: 13 s after
    its incumbent reached 170.5; docs/solver.md, "One-device relaxations first")."""
    from zbsolve.solver import relaxation

    scale = TimeScale.choose(inst)
    share = min(budget.cp_left(), RELAX_FIRST_SHARE * budget.limit)

    def done(raw: int) -> bool:
        bound = _instance_bound(raw, scale)
        return bound is not None and rel_gap(incumbent, bound) <= within

    raw, runs = relaxation.quick_bound(
        inst, options.objective, share, RELAX_FIRST_SLICE, scale=scale, done=done,
        workers=options.workers, seed=options.seed,
        deterministic=options.deterministic, symmetry=options.symmetry,
        memory_model=options.memory_model, params=options.cp_params, shave=options.shave,
        rest=options.relax_rest)
    budget.cp_dtime += sum(r.dtime for r in runs)
    info["relax_first"] = [{"device": r.device, "bound": r.bound / scale.time,
                            "proven": r.proven, "shaved": r.shaved, "rest": r.rest,
                            "seconds": r.seconds, "dtime": r.dtime}
                           for r in runs]
    return (_instance_bound(raw, scale) if runs else None), runs


def _top_relaxation(singles: list[Any]) -> Any:
    """Of the relaxations first, the one whose relaxed schedule is the longest (then the
    highest bound): the bottleneck, where a pair starts and whose order is kept; None where
    none found a schedule (a relaxation with a schedule has its device's order)."""
    return max((r for r in singles if r.value is not None), key=lambda r: (r.value, r.bound),
               default=None)


def _pair_near(inst: Instance, options: SolveOptions, budget: Budget, info: dict[str, Any],
               singles: list[Any], incumbent: float, floor: float, within: float
               ) -> float | None:
    """The top device of the relaxations first (the longest relaxed schedule) kept exact with
    the device its relaxation overloads most (``relax_device(also=...)``), for PAIR_SHARE of
    the budget, where ``incumbent`` is within PAIR_NEAR of ``floor`` but not within
    ``within``; returns its bound in instance units (None where not run or not valid).

    Why only there: a pair proves what no single device does (random-04: 264, its optimum,
    where every single device gives 262.5), but before the search it cost more proof time
    than it saved wherever the schedule, not the bound, was what the proof waited for
    (docs/solver.md, "Two devices kept")."""
    from zbsolve.solver import relaxation

    top = _top_relaxation(singles)
    if (top is None or inst.devices < 3 or rel_gap(incumbent, floor) <= within
            or rel_gap(incumbent, floor) > PAIR_NEAR):
        return None
    mates = [d for d, over in top.overload if over > 0]
    seconds = min(budget.cp_left(), PAIR_SHARE * budget.limit)
    if not mates or seconds <= 0:
        return None
    scale = TimeScale.choose(inst)
    r = relaxation.relax_device(
        inst, options.objective, top.device, seconds, scale=scale, also=(mates[0],),
        workers=options.workers, seed=options.seed, deterministic=options.deterministic,
        lower_bound=max(s.bound for s in singles), symmetry=options.symmetry,
        memory_model=options.memory_model, params=options.cp_params)
    budget.cp_dtime += r.dtime
    info["relax_pair"] = {"devices": [top.device, mates[0]], "bound": r.bound / scale.time,
                          "proven": r.proven, "seconds": r.seconds, "dtime": r.dtime}
    return _instance_bound(r.bound, scale)


def _bottleneck_first(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                      progress: Progress, info: dict[str, Any], singles: list[Any],
                      analytic: float, floor: float) -> bool:
    """A CP-SAT run of the whole model with the bottleneck's order kept: the device whose
    relaxation (of the relaxations first, ``singles``) needs the longest schedule, where their
    bound is above the analytic one; for BOTTLENECK_FIRST_SHARE of the budget. Its schedule joins
    the pool and hints the search after it; its bound holds only with the order and is not
    used. Returns whether it found a schedule.

    Why: the relaxation's order is where that device's memory and round trips allow the
    shortest schedule, which the search from the hand-made or window schedule may not find
    in the time (random-01: 1461-1475 from there at 60 s, 1489-1511 without; docs/solver.md,
    "One-device relaxations first")."""
    scale = TimeScale.choose(inst)
    top = _top_relaxation(singles)
    seconds = min(budget.cp_left(), BOTTLENECK_FIRST_SHARE * budget.limit)
    lifted = max((r.bound for r in singles), default=0) > analytic * scale.time + TOL
    if top is None or not lifted or seconds <= 0:
        return False
    incumbent = best.best().sim.value(options.objective)
    progress.note(incumbent, floor, f"bottleneck first: device {top.device}'s order kept")
    res = _solve_exact(inst, options, best.best(), budget, progress, info, scale,
                       seconds=seconds, order=[list(top.order)], label="bottleneck-first")
    _offer_exact(inst, best, res, info, "bottleneck-first")
    info["bottleneck_first"] = {
        "device": top.device, "relaxed": top.value / scale.time, "proven": top.proven,
        "gap": rel_gap(incumbent, floor),
        "value": None if res.schedule is None else best.best().sim.value(options.objective)}
    return res.schedule is not None


def _switches(inst: Instance, options: SolveOptions, n_ops: int) -> bool:
    """Whether the exact run may give way to the bound search (``SolveOptions.bound_switch``):
    devices with several stages, at most SWITCH_MAX_OPS ops, wall clock (CP-SAT's interleaved
    deterministic search leaves ``lb_tree_search`` out) and not already the bound search.

    Why (docs/solver.md, "Bound search"): on such instances the default search's bound often
    stays at the analytic one for the whole limit (ZB-V's 6.2B times at p = 4, m = 8: 625.18
    after 120 s) where the bound search proves the optimum (the switch: 663.11 at 41 s of a
    60-s solve); but it searches schedules worse on others (random-25: 532 against 513 from
    the start), so it takes over only a search stuck on both sides (``_stuck``) at SWITCH_AT
    of the limit, from the best schedule so far (docs/solver.md, "The bound switch")."""
    return (options.bound_switch and not options.bound_search and not options.deterministic
            and n_ops <= SWITCH_MAX_OPS
            and inst.several_stages_per_device)


def _switch_at(elapsed: float, limit: float) -> float | None:
    """Seconds into a first exact run that starts at ``elapsed`` at which the switch tests it
    (``_stuck``): at SWITCH_AT of the limit, if that leaves the run SWITCH_LOOK of it to show
    whether it is stuck; else None, never (a run that starts after the quarter, or so close to
    it that it has found nothing yet, is not judged)."""
    at = SWITCH_AT * limit - elapsed
    return at if at >= SWITCH_LOOK * limit else None


def _window_phase(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                  progress: Progress, info: dict[str, Any], bound: float, within: float) -> bool:
    """On instances whose devices hold several stages, the window search of the large method
    from the incumbent for ``WINDOWS_SHARE`` of the budget, before CP-SAT; its schedule joins
    the pool, so CP-SAT starts from it. True when it meets ``bound`` within ``within``.

    Why: on those instances CP-SAT's own search is what holds back many proofs (its bound is
    at or near the analytic one long before its incumbent gets there), and the windows find
    good orders fast: on the random family's four open instances, 60 s of windows alone beat
    60 s of CP-SAT on all four (random-01 1595 against 1691, random-25 511 against 544),
    and 10 s of windows then CP-SAT proved random-29 (docs/solver.md, "Windows first").

    Not where the first window would hold the whole model: the windows are then CP-SAT
    restarts of a few seconds on the model the exact phases solve anyway, and a proof waited
    for them (random-16, 108 ops: 0.39 s without the phase, 10.3 s with it)."""
    from zbsolve.solver.large import LNSConfig, first_window_is_whole, improve

    if not inst.several_stages_per_device:
        return False
    cfg = LNSConfig(workers=options.workers, seed=options.seed,
                    deterministic=options.deterministic)
    if first_window_is_whole(inst, best.best().schedule, cfg):
        info["windows"] = "not run: one window would hold the whole model"
        return False
    seconds = (WINDOWS_SHARE * budget.limit if options.deterministic
               else budget.share(WINDOWS_SHARE))
    if seconds <= 0.5:
        return False
    sched, sim, stats = improve(inst, best.best().schedule, options.objective, seconds,
                                config=cfg, bound=bound, gap=within, progress=progress)
    budget.cp_dtime += stats.dtime
    info["windows"] = {k: v for k, v in stats.as_dict().items() if k != "history"}
    best.offer(_Candidate(sched.name, sched, sim), "windows")
    return rel_gap(best.best().sim.value(options.objective), bound) <= within


def _stretch_phase(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                   progress: Progress, info: dict[str, Any], bound: float) -> bool:
    """Solve the instance with fewer microbatches (``stretch.reduced_sizes``, smallest first)
    within ``STRETCH_SHARE`` of the budget and offer every stretch of each reduced schedule
    that the simulator accepts (stretch.py); stop once one meets ``bound`` within the gap.
    True when a reduced solve ran (its CP-SAT time counts as the solver's).

    Why: on devices with several stages and many microbatches the search loses its way in the
    long steady state, and a reduced instance's schedule already has one (vmin/p8-m32: 207
    after 120 s without; 203 = the bound, stretched from the proven 83 of p8-m12;
    docs/solver.md, "Stretching"). The smaller reduced instance is proven sooner; the larger
    one has a steady state where the smaller has none (V-Half p = 4: 6 microbatches give no
    block to repeat, 8 give the proven 194 of p4-m32). Optima of the same reduced instance
    differ in how they repeat, so a proven last m' whose stretches fall short is solved again
    with the next seed (``STRETCH_RETRIES``) while the share allows."""
    from zbsolve.solver.stretch import reduced_sizes

    sizes = reduced_sizes(inst)
    total = (STRETCH_SHARE * budget.limit if options.deterministic
             else budget.share(STRETCH_SHARE))
    t0, d0 = budget.elapsed(), budget.cp_dtime

    def spent() -> float:
        return budget.cp_dtime - d0 if options.deterministic else budget.elapsed() - t0

    runs: list[dict[str, Any]] = []
    attempts = [(m_small, 0) for m_small in sizes]  # (m', retry)
    for k, (m_small, retry) in enumerate(attempts):  # (grows while it runs: retries)
        before = spent()
        last = k == len(attempts) - 1
        seconds = (total - before) * (1.0 if last else STRETCH_FIRST)
        if seconds <= 1.0:
            break
        unit = "deterministic s" if options.deterministic else "s"
        progress.note(best.best().sim.value(options.objective), bound,
                      f"stretch: solving {m_small} microbatches for {seconds:.0f} {unit}")
        runs.append(_stretch_from(inst, m_small, seconds, options, best, budget, retry))
        if runs[-1]["best"] is not None:
            progress.note(best.best().sim.value(options.objective), bound,
                          f"stretched from m={m_small}")
        if rel_gap(best.best().sim.value(options.objective), bound) <= max(TOL, options.gap):
            break
        # another optimum of the same reduced instance may repeat where this one did not
        now = spent()
        if (last and retry < STRETCH_RETRIES and runs[-1]["reduced_status"] == "optimal"
                and total - now >= now - before):
            attempts.append((m_small, retry + 1))
    if runs:
        info["stretch"] = runs
    return bool(runs)


def _unpaired_first(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                    progress: Progress, info: dict[str, Any], bound: float) -> bool:
    """Overlap instances where no hand-made schedule with pairs fits the memory: the same
    instance without pairs solved for UNPAIRED_SHARE of the budget (every schedule of it is one
    of the instance's, its ops alone); its schedule joins the pool, gets pairs where they help
    (``_paired``) and so starts the search. True when the solve ran (its CP-SAT time counts as
    the solver's). Where DualPipe's own pattern fits, it is the better start: there the phase
    cost 0.09-1.3 % (results/bidirectional/README.md, "Without pairs first").

    Why: with a pair to choose for every forward and backward the whole model searches worse
    than without (dualpipe/p4-m16-fb0.8 at 1.5 x its least memory, 20 deterministic s: 1159.14;
    5 s without pairs give 1064.61, and 15 s more with pairs from there 1002.57; docs/solver.md,
    "Without pairs first")."""
    seconds = UNPAIRED_SHARE * budget.limit
    if not options.deterministic:
        seconds = min(seconds, budget.cp_left())
    if seconds <= 1.0:
        return False
    unit = "deterministic s" if options.deterministic else "s"
    progress.note(best.best().sim.value(options.objective), bound,
                  f"without pairs: solving for {seconds:.0f} {unit}")
    sub = dataclasses.replace(options, time_limit=seconds, progress=False,
                              memory_tiebreak=False, gap=0.0, method="exact")
    t0 = budget.elapsed()
    plain = solve(inst.with_(overlap=None), sub)
    budget.cp_dtime += plain.schedule.meta["solver"]["cp_dtime"]
    sim = simulate(inst, plain.schedule)
    if sim.feasible:
        best.offer(_Candidate(plain.schedule.name, plain.schedule, sim), "unpaired")
        _paired(inst, budget, budget.elapsed() + PAIRED_CANDIDATES * PAIRING_SECONDS, best)
    info["unpaired_first"] = {"value": plain.objective_value, "status": plain.status,
                              "seconds": budget.elapsed() - t0,
                              "best": best.best().sim.value(options.objective)}
    return True


def _stretch_from(inst: Instance, m_small: int, seconds: float, options: SolveOptions,
                  best: _Best, budget: Budget, retry: int = 0) -> dict[str, Any]:
    """One reduced solve of ``seconds`` (CP-SAT's seed: the caller's + ``retry``) and its
    stretches, offered to the pool."""
    from zbsolve.solver.stretch import reduced, stretched

    t0 = budget.elapsed()
    # the exact model whatever the caller's method: a reduced instance has at most
    # stretch.MAX_REDUCED_OPS ops, and a stretch is only as good as its schedule (with the
    # large method, vmin/p8-m64 at 120 s: m' = 12 gave 95 against the exact model's proven 83,
    # and the solve ended at 409 against the proven 395); the default search, which the
    # reduced schedule is for, not --bound-search's; and no window phase, which only delays
    # the proof there (m' = 12 of vmin/p8-m32, 60 s: proven in 10.1-10.3 s without it, 32.8-36.7 s
    # with it; of vhalf/p8-m32: 17.9-28.1 s against 25.1-39.3 s; results/multichunk, fifteenth pass)
    # nor the relaxations first: the phase was measured and tuned without them, and each
    # reduced solve would give them up to a tenth of its share
    sub = dataclasses.replace(options, time_limit=seconds, progress=False,
                              memory_tiebreak=False, gap=0.0, method="exact", bound_search=False,
                              windows=False, relax_first=False,
                              seed=(options.seed + retry) % 2**31)
    small = solve(reduced(inst, m_small), sub)
    budget.cp_dtime += small.schedule.meta["solver"]["cp_dtime"]
    stats: dict[str, Any] = {"microbatches": m_small, "seed": sub.seed,
                             "reduced_value": small.objective_value,
                             "reduced_status": small.status,
                             "reduced_method": small.schedule.meta["solver"]["method"],
                             # which CP-SAT runs the reduced solve made ("bound-search": the
                             # bound switch fired there)
                             "reduced_runs": [r["phase"] for r in
                                              small.schedule.meta["solver"].get("cp_runs", [])],
                             "tried": 0, "valid": 0, "best": None}
    # the simulations' own share: wall seconds, or (deterministic) a number of candidates
    until = budget.elapsed() + max(1.0, 0.025 * budget.limit)

    def stop() -> bool:
        if options.deterministic:
            return stats["tried"] >= STRETCH_CANDIDATES
        return budget.elapsed() > until

    for cand in stretched(inst, small.schedule, stop=stop):
        stats["tried"] += 1
        try:
            sim = validate(inst, cand)
        except ScheduleError:
            continue
        stats["valid"] += 1
        value = sim.value(options.objective)
        if stats["best"] is None or value < stats["best"]:
            stats["best"] = value
            best.offer(_Candidate(cand.name, cand, sim), "stretch")
    stats["seconds"] = budget.elapsed() - t0
    return stats


def _max_bound(bounds: list[float | None]) -> float | None:
    return max((b for b in bounds if b is not None), default=None)


def _offer_exact(inst: Instance, best: _Best, res: _Exact, info: dict[str, Any],
                 phase: str) -> None:
    found = _judged(inst, res.schedule, info)
    if found is not None:
        best.offer(_Candidate(found.name, found, validate(inst, found)), phase)


def _relaxations(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                 info: dict[str, Any], scale: TimeScale, lower: int
                 ) -> tuple[int, list[Op]]:
    """Solve the candidates' one-device relaxations within ``RELAX_SHARE`` of the budget (in
    two rounds, below); returns the best bound (model units, at least ``lower``) and the
    bottleneck device's order (below).

    No hint, upper bound or horizon from the incumbent: each of them kept CP-SAT from proving
    random-01's device-0 relaxation (1398 in 9 s without; 1243-1275 after 10 s with one)."""
    from zbsolve.solver import relaxation

    share = min(budget.cp_left(), RELAX_SHARE * budget.limit)
    t0, dtime0 = budget.elapsed(), budget.cp_dtime
    runs, before = [], lower
    seen: dict[int, tuple[int, list[Op]]] = {}  # device: its relaxation's best (value, order)

    def left() -> float:  # of the share: model building counts too (wall clock)
        spent = budget.cp_dtime - dtime0 if options.deterministic else budget.elapsed() - t0
        return share - spent

    def keep(r: relaxation.Relaxation, round_: int) -> None:
        budget.cp_dtime += r.dtime
        runs.append({"device": r.device, "round": round_, "bound": r.bound / scale.time,
                     "value": None if r.value is None else r.value / scale.time,
                     "proven": r.proven, "seconds": r.seconds})
        if r.value is not None and (r.device not in seen or r.value < seen[r.device][0]):
            seen[r.device] = (r.value, list(r.order))

    kw = dict(scale=scale, workers=options.workers, seed=options.seed,
              deterministic=options.deterministic, symmetry=options.symmetry,
              memory_model=options.memory_model, params=options.cp_params)
    # Round 1: a short slice each (most relaxations are proven at the bound at once); round 2:
    # what is left, evenly, to those not proven (their runs start again from scratch).
    slice_ = share / (2 * len(relaxation.candidates(inst)))
    lower, first = relaxation.quick_bound(inst, options.objective, share, slice_, lower=lower,
                                          **kw)
    for r in first:
        keep(r, 1)
    open_ = [r.device for r in first if not r.proven]
    for i, d in enumerate(open_):
        if left() <= 0:
            break
        r = relaxation.relax_device(inst, options.objective, d, left() / (len(open_) - i),
                                    lower_bound=lower, **kw)
        keep(r, 2)
        lower = max(lower, r.bound)
    # the bottleneck: the device whose relaxation needs the longest schedule (shifting
    # bottleneck); none when every relaxation's schedule is at the bound it was given (then
    # no device binds more than the bound already says)
    top = max(seen, key=lambda d: seen[d][0], default=None)
    order = seen[top][1] if top is not None and seen[top][0] > before else []
    info["bottleneck"] = top if order else None
    info["relaxation"] = runs
    return lower, order


def _memory_phase(inst: Instance, options: SolveOptions, best: _Best, budget: Budget,
                  info: dict[str, Any]) -> None:
    """Second CP-SAT phase: the best schedule's step time as an upper bound, memory as the
    objective (``build_model(secondary="memory")``); its schedule is offered like any other.

    Its time: what is left, at most MEMORY_PHASE_SHARE of the limit and at most the time
    spent so far (or MEMORY_PHASE_MIN seconds): a tie-break must not dominate the solve. On
    the wall clock what is left is net of building its model (as long as the exact model's
    longest build) and of ``finish_reserve``: begun with less, it would end past the limit
    (V-Min p = 16, m = 128: 0.9 s past, twenty-first pass).
    """
    from ortools.sat.python import cp_model

    cost = 0.0 if budget.deterministic else (info.get("build_seconds", 0.0)
                                             + finish_reserve(info.get("ops", 0)))
    seconds = min(budget.cp_left() - cost, MEMORY_PHASE_SHARE * budget.limit,
                  max(MEMORY_PHASE_MIN, budget.cp_dtime if budget.deterministic
                      else budget.elapsed()))
    if seconds <= 0.05:
        info["memory_phase"] = "not run: no time left"
        return
    top = best.best()
    scale = TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    hint, pairs, ub, horizon = _model_hint(si, top.schedule, options)
    if ub is None:
        info["memory_phase"] = "not run: the best schedule gives no upper bound in the model"
        return
    sm = build_model(inst, options.objective, upper_bound=ub, horizon=horizon,
                     memory_model=options.memory_model, symmetry=options.symmetry, scale=scale,
                     secondary="memory")
    sm.add_hint(hint, pairs)
    solver, code = _run(sm, dataclasses.replace(options, gap=0.0), budget, seconds)
    info["memory_phase"] = {"cp_status": solver.status_name(code), "seconds": seconds,
                            "cp_wall": solver.wall_time}
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return
    sched = Schedule(sm.entries(solver), name=f"cpsat-memory-{options.objective}")
    try:
        sim = simulate(inst, sched)
    except ScheduleError:  # cannot happen for a model solution; never fatal for a tie-break
        return
    if sim.feasible:
        best.offer(_Candidate(sched.name, sched, sim), "memory")
