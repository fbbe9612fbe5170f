"""The CP-SAT model of a pipeline schedule (I/W split), built so callers can freeze parts of it.

One fixed-size interval per op (F, I, W), a NoOverlap per device, the precedences of
``zbsolve.dag.deps`` with the comm delay, memory per device (cumulative over activation
lifetimes, or a reservoir of allocate/free events), and the objective (makespan or the longest
per-device span).

Integer time
------------
CP-SAT needs integers. ``TimeScale.choose`` multiplies every duration and ``comm`` by the
smallest power of ten (1 .. 10**6) that makes them all integers; if none does, by the smallest
one that rounds every positive value with relative error < 0.1%. ``time_error`` records the worst
relative rounding (0 when exact). Memory is scaled the same way; if it cannot be made exact,
demands are rounded up and limits down, so the model can only be stricter than the instance
(``memory_exact`` False). The simulator re-times the solver's per-device orders with the true
float times anyway, so rounding only decides which order is found, never the reported figures.

For the other solvers (large-neighbourhood search, decomposition)
----------------------------------------------------------------
``build_model(inst, objective, fixed=..., window=..., order=..., hint=...)`` returns a
``ScheduleModel``. All times passed in or read out are in model units (``scale.t(x)``).
- ``fixed``: {op: start} pins those ops (e.g. everything outside the neighbourhood).
- ``window``: {op: (lo, hi)} bounds an op's start (e.g. a rolling horizon).
- ``order``: sequences of ops whose relative order is kept (each consecutive pair becomes a
  precedence); pass a device's order to keep its sequence but let the times float.
- ``hint``: {op: start}, complete or partial (e.g. the incumbent).
Then ``solver.solve(sm.model)`` and ``sm.starts(solver)`` / ``sm.orders(starts)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from zbsolve.dag import all_ops, deps
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.solver.bounds import analytic_bound, heads_tails

OBJECTIVES = ("makespan", "span")
MEMORY_MODELS = ("cumulative", "reservoir")
MAX_POW10 = 6
ROUNDING_TOLERANCE = 1e-3  # relative, per duration


def _is_int(x: float) -> bool:
    return abs(x - round(x)) <= 1e-9 * max(1.0, abs(x))


@dataclass(frozen=True)
class TimeScale:
    """Model units: integer time = round(t * time), integer memory = memory-scaled values."""

    time: int
    memory: int
    time_error: float  # worst relative rounding error of a duration or comm (0 = exact)
    memory_exact: bool

    @staticmethod
    def choose(inst: Instance) -> TimeScale:
        times = [x for x in (*inst.F, *inst.I, *inst.W, inst.comm) if x > 0]
        t_scale = _pick_scale(times, exact=True) or _pick_scale(times, exact=False)
        if t_scale is None:
            raise ValueError(
                "times: cannot represent the durations with 0.1% accuracy using a scale of at "
                f"most 10**{MAX_POW10}; rescale times (e.g. to milliseconds)"
            )
        err = max((abs(round(x * t_scale) - x * t_scale) / (x * t_scale) for x in times),
                  default=0.0)
        mems = [x for x in (*inst.activation, *inst.weight,
                            *(v for v in inst.limit if v is not None)) if x > 0]
        m_scale = _pick_scale(mems, exact=True)
        return TimeScale(t_scale, m_scale or 10**4, err if err > 1e-12 else 0.0,
                         m_scale is not None)

    def t(self, x: float) -> int:
        return int(round(x * self.time))

    def to_time(self, k: float) -> float:
        return k / self.time

    def mem_up(self, x: float) -> int:
        y = x * self.memory
        return int(round(y)) if _is_int(y) else math.ceil(y)

    def mem_down(self, x: float) -> int:
        y = x * self.memory
        return int(round(y)) if _is_int(y) else math.floor(y)

    @property
    def exact(self) -> bool:
        """True when the integer model is the instance itself (its bound is the true bound)."""
        return self.time_error == 0.0 and self.memory_exact


def _pick_scale(values: list[float], exact: bool) -> int | None:
    for k in range(MAX_POW10 + 1):
        s = 10**k
        if exact and all(_is_int(x * s) for x in values):
            return s
        if not exact and all(
            round(x * s) >= 1 and abs(round(x * s) - x * s) / (x * s) < ROUNDING_TOLERANCE
            for x in values
        ):
            return s
    return None


def scaled_instance(inst: Instance, scale: TimeScale) -> Instance:
    """The instance in model units (integer-valued floats): what CP-SAT actually solves.

    ``dataclasses.replace`` rather than ``with_``: the values are already validated, and a
    per-device ``None`` limit must survive.
    """
    return dataclasses.replace(
        inst,
        F=tuple(float(scale.t(x)) for x in inst.F),
        I=tuple(float(scale.t(x)) for x in inst.I),
        W=tuple(float(scale.t(x)) for x in inst.W),
        comm=float(scale.t(inst.comm)),
        activation=tuple(float(scale.mem_up(x)) for x in inst.activation),
        weight=tuple(float(scale.mem_up(x)) for x in inst.weight),
        limit=tuple(None if x is None else float(scale.mem_down(x)) for x in inst.limit),
    )


@dataclass
class ScheduleModel:
    """A built CP-SAT model plus the handles a caller needs to steer and read it."""

    model: cp_model.CpModel
    inst: Instance  # the original instance
    scaled: Instance  # in model units
    scale: TimeScale
    objective: str
    horizon: int
    start: dict[Op, cp_model.IntVar]
    interval: dict[Op, cp_model.IntervalVar]
    first: list[cp_model.IntVar]  # per device: start of its first op
    last: list[cp_model.IntVar]  # per device: end of its last op
    objective_var: cp_model.IntVar
    analytic_bound: int  # in model units, on the scaled instance
    stats: dict = field(default_factory=dict)

    def duration(self, op: Op) -> int:
        return int(self.scaled.duration(op.kind, op.stage))

    def starts(self, solver: cp_model.CpSolver) -> dict[Op, int]:
        return {op: solver.value(v) for op, v in self.start.items()}

    def orders(self, starts: Mapping[Op, float]) -> list[list[Op]]:
        """Per-device orders by start time (ops of a device never overlap, so no ties)."""
        rows: list[list[Op]] = [[] for _ in range(self.inst.devices)]
        for op in sorted(self.start, key=lambda o: (starts[o], o.kind != "I")):
            rows[self.inst.placement[op.stage]].append(op)
        return rows

    def add_hint(self, starts: Mapping[Op, int]) -> None:
        for op, t in starts.items():
            if op in self.start:
                self.model.add_hint(self.start[op], int(t))


def sorted_by_microbatch(starts: Mapping[Op, float]) -> dict[Op, float]:
    """Relabel microbatches so each (kind, stage) runs in microbatch order (same time slots).

    Valid for any feasible schedule (bounds.py, module docstring): used to make a hint agree
    with the symmetry-breaking constraints.
    """
    slots: dict[tuple[str, int], list[float]] = {}
    for op, t in starts.items():
        slots.setdefault((op.kind, op.stage), []).append(t)
    out: dict[Op, float] = {}
    for (kind, stage), times in slots.items():
        for j, t in enumerate(sorted(times)):
            out[Op(kind, stage, j)] = t
    return out


def build_model(
    inst: Instance,
    objective: str = "makespan",
    *,
    fixed: Mapping[Op, int] | None = None,
    window: Mapping[Op, tuple[int, int]] | None = None,
    order: Iterable[Sequence[Op]] = (),
    hint: Mapping[Op, int] | None = None,
    horizon: int | None = None,
    upper_bound: int | None = None,
    memory_model: str = "cumulative",
    symmetry: bool = True,
    redundant: bool = True,
    scale: TimeScale | None = None,
) -> ScheduleModel:
    """Build the CP-SAT model (see the module docstring for the LNS-facing arguments).

    ``horizon``: latest end of any op (model units); default: a bound that provably keeps an
    optimal schedule (``upper_bound`` for makespan; the serial bound for span, since a span-
    optimal schedule can be shifted to have no moment where nothing runs or travels).
    ``upper_bound``: objective <= this (e.g. the hint's value). ``symmetry``: microbatch order
    per (kind, stage) (valid, see bounds.py). ``redundant``: per-device work and analytic bounds.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"memory_model: expected one of {MEMORY_MODELS}, got {memory_model!r}")
    scale = scale or TimeScale.choose(inst)
    si = scaled_instance(inst, scale)
    ops = list(all_ops(si))
    dur = {op: int(si.duration(op.kind, op.stage)) for op in ops}
    serial = sum(dur.values()) + int(si.comm) * sum(
        1 for op in ops for _, c in deps(si, op) if c > 0
    )
    if horizon is None:
        horizon = upper_bound if (objective == "makespan" and upper_bound is not None) else serial
    horizon = int(horizon)

    ht = heads_tails(si, ordered=symmetry)
    model = cp_model.CpModel()
    start: dict[Op, cp_model.IntVar] = {}
    interval: dict[Op, cp_model.IntervalVar] = {}
    for op in ops:
        lo = int(ht.head[op])
        hi = horizon - dur[op] - int(ht.tail[op])  # every op ends by the horizon
        if window and op in window:
            lo, hi = max(lo, window[op][0]), min(hi, window[op][1])
        if fixed and op in fixed:
            lo = hi = int(fixed[op])
        if hi < lo:
            hi = lo  # an over-tight horizon or window: the model is infeasible, CP-SAT says so
            model.add_bool_or([])  # explicit contradiction rather than a crash on the domain
        start[op] = model.new_int_var(lo, hi, str(op))
        interval[op] = model.new_fixed_size_interval_var(start[op], dur[op], f"i{op}")

    for op in ops:
        for pred, delay in deps(si, op):
            model.add(start[op] >= start[pred] + dur[pred] + int(delay))
    for seq in order:
        for a, b in zip(seq, seq[1:]):
            model.add(start[b] >= start[a] + dur[a])
    if symmetry:
        for op in ops:
            if op.mb + 1 < si.microbatches:
                nxt = Op(op.kind, op.stage, op.mb + 1)
                model.add(start[nxt] >= start[op] + dur[op])

    p = si.devices
    first, last = [], []
    for d in range(p):
        dev_ops = [op for op in ops if si.placement[op.stage] == d]
        model.add_no_overlap([interval[op] for op in dev_ops])
        f = model.new_int_var(0, horizon, f"first{d}")
        e = model.new_int_var(0, horizon, f"last{d}")
        # A device's first op is an F and its last a W (every I/W of d follows an F of d, and
        # every op of d is followed by a W of d), so only those are linked.
        for op in dev_ops:
            if op.kind == "F":
                model.add(f <= start[op])
            elif op.kind == "W":
                model.add(e >= start[op] + dur[op])
        lead = Op("F", min(si.stages_of(d)), 0)
        if symmetry:  # the first op is F(lowest stage, 0): make it exact
            model.add(f == start[lead])
        if objective == "span":
            # Span is measured with every device starting as early as the DAG allows (as the
            # ASAP simulator does): otherwise a late start would shorten a span on paper only.
            if not symmetry:
                model.add_min_equality(f, [start[op] for op in dev_ops if op.kind == "F"])
            model.add(f == int(ht.head[lead]))
        if redundant:
            model.add(e >= f + int(si.device_work(d)))
        if symmetry:
            _add_memory_precedences(model, si, d, start, dur)
        first.append(f)
        last.append(e)
        _add_memory(model, si, d, dev_ops, start, dur, horizon, memory_model)

    lb = int(math.ceil(analytic_bound(si, objective) - 1e-9)) if redundant else 0
    obj = model.new_int_var(lb, horizon, objective)
    if objective == "makespan":
        model.add_max_equality(obj, last)
    else:
        spans = []
        for d in range(p):
            sp = model.new_int_var(0, horizon, f"span{d}")
            model.add(sp == last[d] - first[d])
            spans.append(sp)
        model.add_max_equality(obj, spans)
    if upper_bound is not None:
        model.add(obj <= int(upper_bound))
    model.minimize(obj)

    sm = ScheduleModel(model, inst, si, scale, objective, horizon, start, interval, first, last,
                       obj, lb, {"ops": len(ops), "horizon": horizon})
    if hint:
        sm.add_hint(hint)
    return sm


def _add_memory(
    model: cp_model.CpModel,
    si: Instance,
    d: int,
    dev_ops: list[Op],
    start: dict[Op, cp_model.IntVar],
    dur: dict[Op, int],
    horizon: int,
    memory_model: str,
) -> None:
    """Memory of device d against its limit (nothing when the limit can never bind)."""
    limit = si.limit[d]
    stages = si.stages_of(d)
    if limit is None or limit >= si.microbatches * sum(si.activation[s] for s in stages):
        return
    cap = int(limit)
    if memory_model == "reservoir":
        times, changes = [], []
        for op in dev_ops:
            s, a, w = op.stage, int(si.activation[op.stage]), int(si.weight[op.stage])
            if op.kind == "F":
                times.append(start[op])
                changes.append(a)
            elif op.kind == "I" and a - w > 0:
                times.append(start[op] + dur[op])
                changes.append(-(a - w))
            elif op.kind == "W" and w > 0:
                times.append(start[op] + dur[op])
                changes.append(-w)
        model.add_reservoir_constraint(times, changes, 0, cap)
        return
    intervals, demands = [], []
    for op in dev_ops:
        if op.kind != "F":
            continue
        s, j = op.stage, op.mb
        a, w = int(si.activation[s]), int(si.weight[s])
        for kind, demand in (("I", a - w), ("W", w)):
            if demand <= 0:
                continue
            other = Op(kind, s, j)
            end = start[other] + dur[other]
            size = model.new_int_var(dur[op], horizon, f"life{kind}{op}")
            intervals.append(model.new_interval_var(start[op], size, end, f"mem{kind}{op}"))
            demands.append(demand)
    model.add_cumulative(intervals, demands, cap)


def in_flight_caps(inst: Instance, d: int) -> dict[int, int]:
    """Per stage s of device d: L such that F(s, j+L) cannot start before I(s, j) has ended.

    In microbatch order, if I(s, j) has not ended when F(s, j+L) starts, then for every
    microbatch j..j+L the activations of s and of all lower stages of d are alive (their
    forwards have started, their input backwards wait on I(s, .)), so the device holds at least
    (L+1) * A_s, A_s = sum of activation[s'] over stages s' <= s of d. That exceeds the limit
    for L = floor(limit / A_s). Only the stages where this leaves L < m are returned.
    """
    limit = inst.limit[d]
    if limit is None:
        return {}
    out = {}
    stages = sorted(inst.stages_of(d))
    for s in stages:
        need = sum(inst.activation[t] for t in stages if t <= s)
        cap = int(math.floor(limit / need + 1e-9))
        if cap < inst.microbatches:
            out[s] = cap
    return out


def _add_memory_precedences(model: cp_model.CpModel, si: Instance, d: int,
                            start: dict[Op, cp_model.IntVar], dur: dict[Op, int]) -> None:
    """Redundant precedences implied by memory (valid with the microbatch-order symmetry)."""
    for s, cap in in_flight_caps(si, d).items():
        for j in range(si.microbatches - cap):
            i_op = Op("I", s, j)
            model.add(start[Op("F", s, j + cap)] >= start[i_op] + dur[i_op])
