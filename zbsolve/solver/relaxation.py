"""One-device relaxations: lower bounds that see one device's memory and order exactly.

Why. On devices that hold several stages the analytic bounds (``bounds.py``) treat each device
as a machine whose jobs arrive at their heads and leave with their tails. They cannot see that a
device's memory limits how many microbatches it may start before the first one comes back from
the other end of the pipeline, nor how that interacts with the order of its own stages. The full
CP-SAT model sees all of it, but on hundreds of ops with tight memory its bound moves slowly
(random-01 of the issue-18 family: 1253 after 60 s against an incumbent of 1751).

The relaxation of device d is the full model (``model.build_model``) with every other device's
one-at-a-time and memory constraints left out (``relaxed``): d's ops run one at a time under
d's memory limit, every precedence, delay, microbatch order and implied memory precedence stays,
and the other devices run whatever is ready at once. Every schedule of the instance satisfies
the relaxation (it only lost constraints), so the relaxation's optimum, and any bound CP-SAT
proves on it, is at most the instance's optimum. It is much easier to prove: on random-01 the
relaxation of device 0 is proven at 1398 in 6-10 s.

Keeping two devices exact (``also``) is a relaxation too, and a stronger one: the pair's
optimum is at least each one's. It sees what neither device sees alone, a microbatch that waits
on one device while the other has nothing to do; on issue 18's random family the top device
paired with the one its relaxation overloads most proves random-05's and random-06's optima
(307 and 423, against 294 and 416 for the best single device) in under 5 s. ``solve`` runs
one pair only where its incumbent is already near the bound (``api._pair_near``): run before
every search, or in the ``--relax`` phase, pairs cost more proof time than they saved
(docs/solver.md, "Two devices kept").

Its solution is also a start for the search: the order it gives the device whose relaxation is
highest (the bottleneck) can be imposed on the full model, which then decides the other devices
around it (``api.py``, the bottleneck phase: random-01 1751 -> 1462).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.solver import projected
from zbsolve.solver.bounds import min_memory_limit
from zbsolve.solver.model import TimeScale, build_model


@dataclass(frozen=True)
class Relaxation:
    """The relaxation of one device (with ``also``: of it and those devices), solved.
    ``bound`` (model units) is a lower bound on the instance's objective in the scaled model;
    ``order`` the ops of ``device`` in the relaxation's best solution, empty if none was
    found."""

    device: int
    bound: int
    value: int | None  # the relaxation's best solution (None: none found)
    proven: bool  # the relaxation's optimum was reached: no more is to be had from it
    order: tuple[Op, ...]
    seconds: float  # wall
    dtime: float  # CP-SAT's deterministic time
    also: tuple[int, ...] = ()  # devices kept exact with ``device`` (a pair relaxation)
    # (device, model time its ops overlap one another in the relaxation's best solution), for
    # each device left out, the most overloaded first: the partner to try for a pair
    overload: tuple[tuple[int, int], ...] = ()
    shaved: bool = False  # a second run with the shaving search (``quick_bound``'s ``shave``)
    rest: bool = False  # the last run, on what was left of the share (``quick_bound``'s ``rest``)


def applies(inst: Instance) -> str | None:
    """None where the relaxation phase runs on ``inst``, else why not. The bound would hold
    for every instance (dropping constraints is always a relaxation), but the bottleneck's
    order is a plain op sequence only without memory modes still to choose (R ops of the
    relaxation's choosing) and without overlapped pairs (two ops at one start)."""
    graph = TaskGraph(inst)
    if graph.open:
        return "memory modes to choose: the relaxation's order would fix them"
    if graph.overlap:
        return "overlapped pairs: the relaxation's order is not a sequence of ops"
    return None


def candidates(inst: Instance) -> list[int]:
    """Devices worth a relaxation, most promising first: those that hold more than one stage
    (a one-stage device's relaxation is its head-body-tail bound, which ``bounds.py`` already
    has) and have a memory limit, the least room above their least feasible limit first."""
    need = min_memory_limit(inst)
    devs = [d for d in range(inst.devices)
            if len(inst.stages_of(d)) > 1 and inst.limit[d] is not None]
    return sorted(devs, key=lambda d: (inst.limit[d] / max(need[d], 1e-12), d))


def relax_device(inst: Instance, objective: str, device: int, seconds: float, *,
                 scale: TimeScale, also: tuple[int, ...] = (), workers: int = 2, seed: int = 0,
                 deterministic: bool = False, lower_bound: int = 0, symmetry: bool = True,
                 memory_model: str = "cumulative",
                 params: dict[str, Any] | None = None, project: bool = True) -> Relaxation:
    """Solve the relaxation of ``device`` (and of the devices ``also``, kept exact with it) for
    at most ``seconds`` (module docstring), with the objective at or above ``lower_bound``
    (model units, a bound proven elsewhere); ``params``: CP-SAT parameters on top of the exact
    model's (``results/multichunk/relax_probe.py`` passes its own). With ``project`` (where
    it applies) the free devices are projected out (``projected.py``: the same optimum, a
    model of the kept devices' ops only; the random family's proofs in 0.43 of the time).

    No hint, upper bound or horizon from a known schedule, though each would keep the bound
    valid: each kept CP-SAT from proving random-01's device-0 relaxation (1398 in 9 s
    without; 1243-1275 after 10 s with one, docs/solver.md)."""
    from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver, run

    others = [d for d in range(inst.devices) if d != device and d not in also]
    pm = projected.build(inst, objective, (device, *also), scale=scale, symmetry=symmetry,
                         memory_model=memory_model, lower_bound=lower_bound) if project else None
    sm = None if pm is not None else build_model(
        inst, objective, scale=scale, symmetry=symmetry, memory_model=memory_model,
        relaxed=others, lower_bound=lower_bound)
    solver = new_solver(seconds, workers=workers, seed=seed, deterministic=deterministic,
                        extra={**EXACT_MODEL_PARAMS, **(params or {})})
    code = run(solver, sm.model if pm is None else pm.model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        # infeasible (only where rounded memory makes the model stricter than the instance) or
        # an invalid model: nothing learnt, the caller's bound stands
        return Relaxation(device, int(lower_bound), None, False, (), solver.wall_time,
                          solver.deterministic_time, also)
    bound = int(round(solver.best_objective_bound))
    order: tuple[Op, ...] = ()
    overload: tuple[tuple[int, int], ...] = ()
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if pm is not None:
            starts = pm.complete({op: solver.value(v) for op, v in pm.start.items()})
            graph, duration = pm.graph, pm.duration
        else:
            starts, graph, duration = sm.starts(solver), sm.graph, sm.duration
        order = tuple(sorted((op for op in graph.device_ops(device)),
                             key=lambda op: (starts[op], op)))
        over = {d: _overlap([(starts[op], starts[op] + duration(op))
                             for op in graph.device_ops(d)]) for d in others}
        overload = tuple(sorted(over.items(), key=lambda kv: (-kv[1], kv[0])))
    value = int(round(solver.objective_value)) if order else None
    return Relaxation(device, max(bound, int(lower_bound)), value, code == cp_model.OPTIMAL,
                      order, solver.wall_time, solver.deterministic_time, also, overload)


def _overlap(spans: list[tuple[int, int]]) -> int:
    """How much of the intervals' total length lies under another one: their lengths minus
    the length of their union (0 for intervals one after the other)."""
    union, lo, hi = 0, None, None
    for a, b in sorted(spans):
        if hi is None or a > hi:
            union += 0 if hi is None else hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    union += 0 if hi is None else hi - lo
    return sum(b - a for a, b in spans) - union


def quick_bound(inst: Instance, objective: str, share: float, per_device: float, *,
                scale: TimeScale, lower: int = 0, done: Callable[[int], bool] | None = None,
                workers: int = 2, seed: int = 0, deterministic: bool = False,
                symmetry: bool = True, memory_model: str = "cumulative",
                params: dict[str, Any] | None = None,
                shave: bool = False, rest: bool = False) -> tuple[int, list[Relaxation]]:
    """Every candidate's relaxation for at most ``per_device`` seconds, ``share`` in all (wall
    seconds, model building included; deterministic: CP-SAT's deterministic seconds), each
    given the best bound so far, from ``lower`` (model units; ``params``: as
    ``relax_device``'s), until ``done(bound)`` (the bound proves the caller's schedule: no
    relaxation can add to that). With ``shave`` (wall clock only), the share left then goes to
    the relaxations not proven, in the same order, each again for ``per_device`` with the
    shaving search (``cpsat.SHAVE_PARAMS``; ``Relaxation.shaved``). With ``rest``, what is left
    after that, if at least ``per_device``, goes in one run to the relaxation not proven whose
    best relaxed schedule (without one: its bound) is the longest, the most its bound could
    still gain, with the default search (``Relaxation.rest``; random-01's device 0: 1244, 1323
    shaved, then 1398 proven in 2-3 s more; docs/solver.md). Where a single relaxation is
    open and that last run will happen, it runs without the shaving slice before it: one run
    of both lengths rather than two restarts of the same relaxation (random-04's device 6,
    264 projected in 3.4 s: 2.8 s after a shaving slice left it at 262.5). Returns the bound
    and the relaxations, in the order they ran.

    Why before the search: most of these relaxations are proven in well under a second; on
    issue 18's random families they lift the bound of 12-14 of 30 instances (4-5 of them to
    the optimum), and of 18 of the 30 near-serial ones (9 to the optimum: random-tight-05 3027
    against an analytic 2742, in 0.2 s; docs/solver.md, "One-device relaxations first").
    The relaxation phase's first round is the same pass with a shorter slice."""
    from zbsolve.solver.cpsat import SHAVE_PARAMS

    t0, dtime = time.perf_counter(), 0.0
    runs: list[Relaxation] = []

    def left() -> float:
        return share - (dtime if deterministic else time.perf_counter() - t0)

    def run(d: int, seconds: float, extra: dict[str, Any] | None = None, **mark: bool) -> bool:
        nonlocal dtime, lower
        if left() <= 0 or (done is not None and done(lower)):
            return False
        r = relax_device(inst, objective, d, min(left(), seconds), scale=scale,
                         workers=workers, seed=seed, deterministic=deterministic,
                         lower_bound=lower, symmetry=symmetry, memory_model=memory_model,
                         params={**(params or {}), **(extra or {})})
        dtime += r.dtime
        lower = max(lower, r.bound)
        runs.append(replace(r, **mark))
        return True

    for d in candidates(inst):
        if not run(d, per_device):
            return lower, runs
    unproven = [r.device for r in runs if not r.proven]
    # one open relaxation and a last run to come: that run gets the slice as well
    alone = rest and len(unproven) == 1 and left() >= per_device
    if shave and not deterministic and not alone:
        for d in unproven:
            if not run(d, per_device, SHAVE_PARAMS, shaved=True):
                return lower, runs
    proven = {r.device for r in runs if r.proven}
    open_ = [r for r in runs if r.device not in proven]
    if rest and open_ and left() >= per_device:
        top = max(open_, key=lambda r: (r.bound if r.value is None else r.value, r.bound,
                                        -r.device))
        run(top.device, left(), rest=True)
    return lower, runs
