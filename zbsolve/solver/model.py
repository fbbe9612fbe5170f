"""The CP-SAT model of a pipeline schedule (I/W split), built so callers can freeze parts of it.

One fixed-size interval per device op (F, I, W), a NoOverlap per device, the precedences of
the task graph (``zbsolve.graph``) with their delays, memory per device (cumulative over activation
lifetimes, or a reservoir of allocate/free events), and the objective (makespan or the longest
per-device span).

Integer time
------------
CP-SAT needs integers. ``TimeScale.choose`` multiplies every duration and ``comm`` by the
smallest power of ten (1 .. 10**6) that makes them all integers; if none does, by their least
common denominator as fractions (``_fraction_scale``: thirds of a model cut in three chunks);
if neither does, by the smallest power of ten that rounds every positive value with relative
error < 0.1%. ``time_error`` records the worst relative rounding (0 when exact). Memory: the
smallest power of ten that makes the demands (activations, weights, params: what is summed)
and the limits integers; else one that makes the demands alone integers (a power of ten, or
their common denominator: memory in GiB counted from bytes is a fraction of denominator 2**k,
its limits often not), each limit rounded down, which is exact: a sum of integers fits a
limit when it fits its floor. If the demands cannot be made exact either, they are rounded
up and limits down, so the model can only be stricter than the instance (``memory_exact``
False): a schedule at the limit is then infeasible in it. The simulator re-times the
solver's per-device orders with the true float times anyway, so rounding only decides which
order is found, never the reported figures.

For the other solvers (large-neighbourhood search, decomposition)
----------------------------------------------------------------
``build_model(inst, objective, fixed=..., window=..., order=..., hint=...)`` returns a
``ScheduleModel``. All times passed in or read out are in model units (``scale.t(x)``).
- ``fixed``: {op: start} pins those ops (e.g. everything outside the neighbourhood).
- ``window``: {op: (lo, hi)} bounds an op's start (e.g. a rolling horizon).
- ``order``: sequences of ops whose relative order is kept (each consecutive pair becomes a
  precedence); pass a device's order to keep its sequence but let the times float.
- ``hint``: {op: start}, complete or partial (e.g. the incumbent).
Then ``cpsat.run(solver, sm.model)`` (``solver.solve``, past an OR-Tools crash) and
``sm.starts(solver)`` / ``sm.orders(starts)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from ortools.sat.python import cp_model

from zbsolve.graph import COMPUTE, END, KEEP, START, Lifetime, TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Entry, Kind, Op, Pair
from zbsolve.simulate import allocates
from zbsolve.solver import dual_feasible
from zbsolve.solver.bounds import (
    analytic_bound,
    heads_tails,
    memory_edges,
    memory_stairs,
    min_memory_limit,
)

OBJECTIVES = ("makespan", "span")
MEMORY_MODELS = ("cumulative", "reservoir")
MAX_POW10 = 6
MAX_DENOMINATOR = 10**MAX_POW10  # of one figure read as a fraction (``_fraction_scale``)
FRACTION_ULPS = 4  # ... which it is where it lies this close to the float (14.41 * 2 / 3)
ROUNDING_TOLERANCE = 1e-3  # relative, per duration
FULLNESS_STEPS = 10_000  # the memory phase measures fullness (peak / limit) in these steps

TimeAt = Callable[[Op, int], int]  # (op, START or END) -> its time in a hinted schedule


@dataclass(frozen=True)
class Derived:
    """A variable whose value follows from the ops' start times (a lifetime's length, a
    device's first start or last end, a span, the objective): ``value(at, known)`` computes
    it from the hinted starts (``at``) and the values of the derived variables before it
    (``known``, by variable index). Hinting these completes the hint: CP-SAT then takes a
    feasible hint as its first solution at once, instead of searching for the missing values
    (measured on the random multi-chunk family: docs/solver.md, "Complete hints")."""

    var: cp_model.IntVar
    value: Callable[[TimeAt, dict[int, int]], int]


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
        times = [x for x in (*_op_times(inst), *inst.sync, inst.comm, *_pair_works(inst),
                             *_mode_times(inst), *_step_times(inst)) if x > 0]
        t_scale = (_pick_scale(times, exact=True) or _fraction_scale(times)
                   or _pick_scale(times, exact=False))
        if t_scale is None:
            raise ValueError(
                "times: cannot represent the durations with 0.1% accuracy using a scale of at "
                f"most 10**{MAX_POW10}; rescale times (e.g. to milliseconds)"
            )
        err = max((abs(round(x * t_scale) - x * t_scale) / (x * t_scale) for x in times),
                  default=0.0)
        demands = [x for x in (*_unit_memories(inst), *inst.params, *_mode_memory(inst))
                   if x > 0]
        mems = [*demands, *(v for v in inst.limit if v is not None and v > 0)]
        m_scale = (_pick_scale(mems, exact=True) or _segment_memory_scale(inst, mems)
                   or _pick_scale(demands, exact=True) or _fraction_scale(demands))
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


def _step_times(inst: Instance) -> list[float]:
    """The step boundary's durations, when its jobs exist (``zbsolve.step``)."""
    return inst.step.times() if inst.step.active else []


def _op_times(inst: Instance) -> list[float]:
    """Every F, I, W duration an op can have (per segment when there are segments)."""
    return [x for key in ("F", "I", "W") for row in inst.segment_table(key) for x in row]


def _unit_memories(inst: Instance) -> list[float]:
    return [x for key in ("activation", "weight") for row in inst.segment_table(key) for x in row]


def _segment_memory_scale(inst: Instance, mems: list[float]) -> int | None:
    """Segments split memory by length (l / total of each stage's figure), rarely a decimal:
    10**k times the total length (tokens) makes those exact when the stage figures are."""
    total = sum(inst.segment_lengths)
    if inst.segments == 1 or not _is_int(total):
        return None
    for k in range(MAX_POW10 + 1):
        s = int(round(total)) * 10**k
        if all(_is_int(x * s) for x in mems):
            return s
    return None


def _pair_works(inst: Instance) -> list[float]:
    """x (F + I) and x (F + I + W) of every overlapped pair the instance allows: the pair
    durations the model needs as integers too."""
    if inst.overlap is None:
        return []
    graph = TaskGraph(inst)
    return [x * (inst.F[a] + inst.I[b] + w) for d in range(inst.devices)
            for a, b, x in graph.pair_options(d) for w in (0.0, inst.W[b])]


def _mode_times(inst: Instance) -> list[float]:
    """The memory modes' job times (R, R_selective, d2h, h2d): integers in the model too."""
    out: list[float] = []
    if inst.recompute is not None:
        out += [*inst.recompute.R, *(inst.recompute.R_selective or ())]
    if inst.offload is not None:
        out += [*inst.offload.d2h, *inst.offload.h2d]
    return out


def _mode_memory(inst: Instance) -> list[float]:
    """What the memory modes keep and move: the model's memory amounts besides activations."""
    out: list[float] = []
    if inst.recompute is not None:
        out += [*inst.recompute.kept, *(inst.recompute.kept_selective or ())]
    if inst.offload is not None:
        out += [inst.moved(s) for s in range(inst.stages)]
    return out


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


def _fraction_scale(values: list[float]) -> int | None:
    """The least common denominator of ``values`` read as fractions (denominators at most
    MAX_DENOMINATOR each), where it is at most 10**MAX_POW10 and makes every value an integer;
    else None.

    Why: figures cut in three are integers at no power of ten (a model split into three chunks
    per device: each chunk's activation 2/3 of a V chunk's, its times 1441/150 ms), nor are
    GiB counted from bytes (577/32768 for a planned Llama's activation). Rounded, the model's
    memory is stricter than the instance's, so a schedule at the limit is infeasible in it
    and neither the window search nor CP-SAT's hint can start from it, and its times are off,
    so no bound proven on it holds for the instance."""
    scale = 1
    for x in values:
        f = Fraction(x).limit_denominator(MAX_DENOMINATOR)
        if abs(float(f) - x) > FRACTION_ULPS * math.ulp(x):
            return None  # no such fraction: x is one only up to float rounding (pi is not)
        scale = math.lcm(scale, f.denominator)
        if scale > 10**MAX_POW10:
            return None
    return scale if all(_is_int(x * scale) for x in values) else None


def scaled_instance(inst: Instance, scale: TimeScale) -> Instance:
    """The instance in model units (integer-valued floats): what CP-SAT actually solves.

    ``dataclasses.replace`` rather than ``with_``: the values are already validated, and a
    per-device ``None`` limit must survive.
    """
    def times(values: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(float(scale.t(x)) for x in values)

    def mems(values: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(float(scale.mem_up(x)) for x in values)

    rec, off = inst.recompute, inst.offload
    if rec is not None:
        rec = dataclasses.replace(
            rec, R=times(rec.R), kept=mems(rec.kept),
            R_selective=None if rec.R_selective is None else times(rec.R_selective),
            kept_selective=None if rec.kept_selective is None else mems(rec.kept_selective))
    if off is not None:
        off = dataclasses.replace(off, d2h=times(off.d2h), h2d=times(off.h2d))
    limit = tuple(None if x is None else float(scale.mem_down(x)) for x in inst.limit)
    if inst.segments > 1:  # each segment rounded; the per-stage figures are their sums
        tables = {key: tuple(times(row) if key in ("F", "I", "W") else mems(row)
                             for row in inst.segment_table(key))
                  for key in ("F", "I", "W", "activation", "weight")}
        wholes = {key: tuple(float(sum(row)) for row in table) for key, table in tables.items()}
        return dataclasses.replace(
            inst, **wholes, **{f"seg_{key}": table for key, table in tables.items()},
            sync=times(inst.sync), comm=float(scale.t(inst.comm)), params=mems(inst.params),
            limit=limit, step=inst.step.scaled(scale.t))
    return dataclasses.replace(
        inst, F=times(inst.F), I=times(inst.I), W=times(inst.W), sync=times(inst.sync),
        comm=float(scale.t(inst.comm)),
        activation=mems(inst.activation), weight=mems(inst.weight), params=mems(inst.params),
        limit=limit, recompute=rec, offload=off, step=inst.step.scaled(scale.t),
    )


@dataclass
class ScheduleModel:
    """A built CP-SAT model plus the handles a caller needs to steer and read it."""

    model: cp_model.CpModel
    inst: Instance  # the original instance
    scaled: Instance  # in model units
    graph: TaskGraph  # of the scaled instance
    scale: TimeScale
    objective: str
    horizon: int
    start: dict[Op, cp_model.IntVar]
    interval: dict[Op, cp_model.IntervalVar]  # device ops only
    first: list[cp_model.IntVar]  # per device: start of its first op
    last: list[cp_model.IntVar]  # per device: end of its last op
    objective_var: cp_model.IntVar
    analytic_bound: int  # in model units, on the scaled instance
    stats: dict = field(default_factory=dict)
    pairs: list[PairChoice] = field(default_factory=list)
    solo: dict[Op, cp_model.IntVar] = field(default_factory=dict)
    end_var: dict[Op, cp_model.IntVar] = field(default_factory=dict)
    modes: list[ModeChoice] = field(default_factory=list)
    derived: list[Derived] = field(default_factory=list)

    def duration(self, op: Op) -> int:
        return int(self.graph.duration(op))

    def starts(self, solver: cp_model.CpSolver) -> dict[Op, int]:
        return {op: solver.value(v) for op, v in self.start.items()}

    def orders(self, starts: Mapping[Op, float]) -> list[list[Op]]:
        """Per-device orders by start time (ops of a device never overlap, so no ties)."""
        rows: list[list[Op]] = [[] for _ in range(self.inst.devices)]
        for op in sorted(self.interval, key=lambda o: (starts[o], o.kind != Kind.I)):
            if not self.graph.is_tail(op):  # optimizer steps: placed by the tail rule
                rows[self.graph.device(op)].append(op)
        return rows

    def entries(self, solver: cp_model.CpSolver) -> list[list[Entry]]:
        """Per-device jobs of a solution, by start time: ops alone, the chosen pairs and the
        chosen modes' recomputes; the chosen copies written where the simulator's row rules
        (``zbsolve.simulate``) keep their memory: a copy out right after the last allocating
        job that starts before it ends, a load after the last compute job that ends before it
        starts (a stream's copies kept in start order)."""
        chosen = [c for c in self.pairs if solver.boolean_value(c.present)]
        inside = {op for c in chosen for op in (c.forward, c.backward)}
        inside |= {c.backward._replace(kind=Kind.W) for c in chosen if c.with_weight}
        jobs: list[tuple[int, bool, int, Entry, int]] = [
            (t := solver.value(self.start[op]), op.kind != Kind.I, self.graph.device(op), op,
             t + self.duration(op)) for op in self.interval
            if op not in inside and not self.graph.is_tail(op)]  # optimizer steps: tail rule
        jobs += [(t := solver.value(c.start), False, self.graph.device(c.forward), c.entry,
                  t + c.duration) for c in chosen]
        copies: list[tuple[int, Op]] = []
        for c in self.modes:
            if solver.boolean_value(c.present):
                for op, v in c.start.items():
                    t = solver.value(v)
                    if self.graph.stream(op) == COMPUTE:
                        jobs.append((t, True, self.graph.device(op), op, t + self.duration(op)))
                    else:
                        copies.append((t, op))
        rows: list[list[Entry]] = [[] for _ in range(self.inst.devices)]
        spans: list[list[tuple[int, int, bool]]] = [[] for _ in range(self.inst.devices)]
        for t, _, d, entry, e in sorted(jobs, key=lambda j: (j[0], j[1])):
            rows[d].append(entry)
            spans[d].append((t, e, allocates(entry)))
        if not copies:
            return rows
        placed: list[list[tuple[int, int, Op]]] = [[] for _ in rows]
        last: dict[tuple[int, int], int] = {}  # a stream's copies stay in start order
        outs: list[list[tuple[int, int]]] = [[] for _ in rows]  # (end, position) of copy outs
        for t, op in sorted(copies):
            d = self.graph.device(op)
            if op.kind == Kind.O:  # after the last allocating job that starts before its end
                end = t + self.duration(op)
                pos = max((k + 1 for k, (s, _, a) in enumerate(spans[d]) if a and s < end),
                          default=0)
                outs[d].append((end, pos))
            else:  # after the last job that ends before it starts, and after every copy out
                # that ends before it starts (on its own copy stream, with ``streams: 2``, that
                # order is the only thing that makes the load wait for that free)
                pos = max([sum(1 for _, e, _ in spans[d] if e <= t)]
                          + [k for e, k in outs[d] if e <= t])
            key = (d, self.graph.stream(op))
            pos = last[key] = max(pos, last.get(key, 0))
            placed[d].append((pos, t, op))
        out: list[list[Entry]] = []
        for d, row in enumerate(rows):
            at: dict[int, list[Op]] = {}
            for pos, _, op in sorted(placed[d]):
                at.setdefault(pos, []).append(op)
            merged: list[Entry] = []
            for k in range(len(row) + 1):
                merged += at.get(k, [])
                if k < len(row):
                    merged.append(row[k])
            out.append(merged)
        return out

    def add_hint(self, starts: Mapping[Op, int], pairs: Sequence[Pair] = ()) -> None:
        """Hint start times and, where the model has pair choices, which pairs run (then a
        complete hint: every choice's literal, every end). ``pairs`` name their backward as
        I, or as B when the pair runs the unit's fused backward."""
        starts = dict(starts)
        on: dict[int, int] = {}  # index of a chosen pair choice -> its start
        wanted = {(p.first, p.second._replace(kind=Kind.I), p.second.kind == Kind.B): p
                  for p in pairs}
        members: dict[Op, tuple[int, int]] = {}  # op -> (start, end) inside a hinted pair
        for k, c in enumerate(self.pairs):
            if (c.forward, c.backward, c.with_weight) in wanted and c.forward in starts:
                t = int(starts[c.forward])
                on[k] = t
                for op in (c.forward, c.backward) + (
                        (c.backward._replace(kind=Kind.W),) if c.with_weight else ()):
                    members[op] = (t, t + c.duration)
                    starts[op] = t
        for op, t in starts.items():
            if op in self.start:
                self.model.add_hint(self.start[op], int(t))
        for k, c in enumerate(self.pairs):
            self.model.add_hint(c.present, k in on)
            if k in on:
                self.model.add_hint(c.start, on[k])
        for c in self.modes:  # a mode is hinted where the hint has all its ops
            on_ = all(op in starts for op in c.start)
            self.model.add_hint(c.present, on_)
            for op, v in c.start.items():
                if on_:
                    self.model.add_hint(v, int(starts[op]))
        for op, solo in self.solo.items():
            self.model.add_hint(solo, op not in members)
            if op in members:
                self.model.add_hint(self.end_var[op], members[op][1])
            elif op in starts:
                self.model.add_hint(self.end_var[op], int(starts[op]) + self.duration(op))
        self._complete_hint(starts)

    def _complete_hint(self, starts: Mapping[Op, int]) -> None:
        """Hint every ``derived`` variable when the hint gives every op's start (and the
        model has no pair or mode choices, whose ends and lifetimes depend on the choice)."""
        if self.pairs or self.modes or any(op not in starts for op in self.start):
            return

        def at(op: Op, edge: int) -> int:
            return int(starts[op]) + (0 if edge == START else self.duration(op))

        known: dict[int, int] = {}
        for d in self.derived:
            known[d.var.index] = value = d.value(at, known)
            self.model.add_hint(d.var, value)


def microbatch_relabelling(starts: Mapping[Op, float],
                           follow: frozenset[int] = frozenset()) -> dict[Op, Op]:
    """Relabel microbatches so each (kind, stage, segment) runs in microbatch order (same time
    slots, the same microbatches of that stage): old op -> new op. The Ws of the stages in
    ``follow`` (``TaskGraph.absorbable``) take their own unit's I's new label instead.

    Valid for any feasible schedule (docs/solver.md, "Symmetry breaking"): used to make a hint
    agree with the symmetry-breaking constraints.
    """
    slots: dict[tuple[str, int, int], list[tuple[float, int]]] = {}
    for op, t in starts.items():
        if not (op.kind == Kind.W and op.stage in follow):
            slots.setdefault((op.kind, op.stage, op.seg), []).append((t, op.mb))
    out: dict[Op, Op] = {}
    for (kind, stage, seg), items in slots.items():
        mbs = sorted(mb for _, mb in items)
        for mb, (_, old) in zip(mbs, sorted(items)):
            out[Op(kind, stage, old, seg)] = Op(kind, stage, mb, seg)
    for op in starts:
        if op.kind == Kind.W and op.stage in follow:
            out[op] = out[op._replace(kind=Kind.I)]._replace(kind=Kind.W)
    return out


def whole_microbatch_relabelling(inst: Instance, starts: Mapping[Op, float]) -> dict[Op, Op]:
    """Relabel whole microbatches (every op, memory-mode ops included) so that each replica's
    first forwards run in microbatch order: the only symmetry the model keeps while memory
    modes are still to be chosen (``TaskGraph.same_class_prev``, open view)."""
    S = inst.model_stages
    new_of: dict[int, int] = {}
    for r in range(inst.replicas):
        mbs = list(range(r, inst.microbatches, inst.replicas))
        by_start = sorted(mbs, key=lambda j: (starts.get(Op(Kind.F, r * S, j), math.inf), j))
        new_of.update(zip(by_start, mbs))
    return {op: op._replace(mb=new_of[op.mb]) if op.mb >= 0 else op for op in starts}


def sorted_by_microbatch(starts: Mapping[Op, float]) -> dict[Op, float]:
    """``starts`` relabelled by ``microbatch_relabelling``."""
    relabel = microbatch_relabelling(starts)
    return {relabel[op]: t for op, t in starts.items()}


def serial_horizon(si: Instance, graph: TaskGraph) -> int:
    """Every op of the scaled instance ``si`` one after the other, each hand-off delay paid:
    the default horizon, which keeps a span-optimal schedule (``build_model``)."""
    ops = list(graph.ops())
    return sum(int(graph.duration(op)) for op in ops) + int(si.comm) * sum(
        1 for op in ops for _, c in graph.preds(op) if c > 0)


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
    secondary: str | None = None,
    relaxed: Iterable[int] = (),
    lower_bound: int = 0,
) -> ScheduleModel:
    """Build the CP-SAT model (see the module docstring for the LNS-facing arguments).

    ``horizon``: latest end of any op (model units); default: a bound that provably keeps an
    optimal schedule (``upper_bound`` for makespan; the serial bound for span, since a span-
    optimal schedule can be shifted to have no moment where nothing runs or travels).
    ``upper_bound``: objective <= this (e.g. the hint's value). ``symmetry``: microbatch order
    per (kind, stage) (valid, see bounds.py). ``redundant``: per-device work and analytic bounds.
    ``secondary="memory"``: keep the objective <= ``upper_bound`` and minimize memory instead
    (the peak of the fullest device relative to its limit, then the sum of peaks: the
    tie-break of ``zbsolve.solver.ranking``), the solver's second phase.
    ``relaxed``: devices whose one-at-a-time and memory constraints are left out, a relaxation
    whose optimum bounds the instance's from below (``zbsolve.solver.relaxation``).
    ``lower_bound``: objective >= this (model units), a bound proven elsewhere.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"memory_model: expected one of {MEMORY_MODELS}, got {memory_model!r}")
    scale = scale or TimeScale.choose(inst)
    b = _Builder(inst, scale_=scale, objective=objective, symmetry=symmetry,
                 relaxed=frozenset(relaxed))
    b.variables(horizon, upper_bound, fixed, window)
    b.modes()
    b.pairs_exclusive()
    b.precedences(order)
    if symmetry:
        b.microbatch_order()
    if secondary not in (None, "memory"):
        raise ValueError(f"secondary: expected None or 'memory', got {secondary!r}")
    b.devices(redundant, memory_model)
    if b.graph.has_step:
        b.step_tails(redundant)
    if secondary == "memory":
        b.memory_peaks()
    sm = b.objective(redundant, upper_bound, lower_bound)
    if hint:
        sm.add_hint(hint)
    return sm


@dataclass(frozen=True)
class ModeChoice:
    """A memory mode other than keep that the model may choose for one unit: its literal, and
    the start and optional interval of each op the mode adds (R; or O and L)."""

    unit: tuple[int, int, int]
    mode: str
    present: cp_model.IntVar
    start: dict[Op, cp_model.IntVar]
    interval: dict[Op, cp_model.IntervalVar]


@dataclass(frozen=True)
class PairChoice:
    """An overlapped job the model may choose: F of one stage with the input backward I of
    another stage's unit, or with that unit's whole backward (I and its W: the fused B)."""

    forward: Op
    backward: Op  # an I
    with_weight: bool  # the pair runs the fused B (absorbs the unit's W)
    duration: int  # model units
    present: cp_model.IntVar
    start: cp_model.IntVar
    interval: cp_model.IntervalVar

    @property
    def entry(self) -> Pair:
        bwd = self.backward._replace(kind=Kind.B) if self.with_weight else self.backward
        return Pair(self.forward, bwd)


class _Builder:
    """One small method per constraint family, each building on the variables of the first.

    Without overlapped pairs every device op is one fixed-size interval and its end is
    start + duration. Where the instance allows pairs (``overlap``), an op that may be paired
    gets an end variable and an optional solo interval; each pair choice is an optional
    interval that pins its ops' starts and ends to its own (``pairs``)."""

    def __init__(self, inst: Instance, scale_: TimeScale, objective: str, symmetry: bool,
                 relaxed: frozenset[int] = frozenset()):
        self.inst, self.scale, self.objective_name = inst, scale_, objective
        self.relaxed = relaxed
        self.analytic: float | None = None  # analytic_bound(si, objective), once
        self.si = scaled_instance(inst, scale_)
        self.graph = TaskGraph(self.si)
        self.symmetry = symmetry
        self.model = cp_model.CpModel()
        self.ops = list(self.graph.ops())
        self.dur = {op: int(self.graph.duration(op)) for op in self.ops}
        self.ht = heads_tails(self.si, ordered=symmetry, graph=self.graph)
        self.start: dict[Op, cp_model.IntVar] = {}
        self.interval: dict[Op, cp_model.IntervalVar] = {}
        self.end_var: dict[Op, cp_model.IntVar] = {}  # ops that may run in a pair
        self.solo: dict[Op, cp_model.IntVar] = {}
        self.pairs: list[PairChoice] = []
        # memory modes still to be chosen (the graph's open view): one graph per mode, every
        # unit in it, for the mode's ops, dependencies and lifetimes
        self.mode_graphs = ({m: TaskGraph(self.si, modes=m) for m in self.si.modes if m != KEEP}
                            if self.graph.open else {})
        self.mode_choices: list[ModeChoice] = []
        self.keep_lit: dict[tuple[int, int, int], cp_model.IntVar] = {}
        self.first: list[cp_model.IntVar] = []
        self.last: list[cp_model.IntVar] = []
        self.peaks: list[cp_model.IntVar] | None = None  # per device, with ``memory_peaks``
        self.derived: list[Derived] = []  # what completes a hint of every start

    def end(self, op: Op):
        if op in self.end_var:
            return self.end_var[op]
        return self.start[op] + self.dur[op]

    def variables(self, horizon, upper_bound, fixed, window) -> None:
        """Ensures every op has a start inside its head/tail window and the horizon; device
        ops also get an interval (fixed-size, or optional where the op may be paired)."""
        si, graph = self.si, self.graph
        serial = serial_horizon(si, graph)
        if horizon is None:
            horizon = (upper_bound if (self.objective_name == "makespan" and upper_bound is not None)
                       else serial)
        self.horizon = int(horizon)
        dom: dict[Op, tuple[int, int]] = {}
        for op in self.ops:
            lo = int(self.ht.head[op])
            # every op ends by the horizon (min_duration: an op may end early inside a pair)
            hi = self.horizon - int(math.ceil(graph.min_duration(op) - 1e-9)) - int(self.ht.tail[op])
            if window and op in window:
                lo, hi = max(lo, window[op][0]), min(hi, window[op][1])
            if fixed and op in fixed:
                lo = hi = int(fixed[op])
            if hi < lo:
                hi = lo  # an over-tight horizon or window: the model is infeasible, CP-SAT says so
                self.model.add_bool_or([])  # explicit contradiction rather than a crash on the domain
            dom[op] = (lo, hi)
        options = self._pair_options(dom) if graph.overlap and not fixed else []
        paired = {op for fwd, bwd, _, absorbs, _ in options
                  for op in (fwd, bwd, *((bwd._replace(kind=Kind.W),) if absorbs else ()))}
        for op in self.ops:
            lo, hi = dom[op]
            if op.kind == Kind.W and op in paired:  # an absorbed W starts with its pair
                lo = min(lo, dom[op._replace(kind=Kind.I)][0])
            self.start[op] = self.model.new_int_var(lo, hi, str(op))
            if graph.device(op) is None:
                continue
            if op in paired:
                solo = self.model.new_bool_var(f"solo{op}")
                end = self.model.new_int_var(lo, self.horizon, f"end{op}")
                self.model.add(end == self.start[op] + self.dur[op]).only_enforce_if(solo)
                self.solo[op], self.end_var[op] = solo, end
                self.interval[op] = self.model.new_optional_fixed_size_interval_var(
                    self.start[op], self.dur[op], solo, f"i{op}")
            else:
                self.interval[op] = self.model.new_fixed_size_interval_var(
                    self.start[op], self.dur[op], f"i{op}")
        for option in options:
            self._add_pair(*option)

    def _pair_options(self, dom) -> list[tuple[Op, Op, int, bool, tuple[int, int]]]:
        """The pairs worth a variable: (F, I, duration, absorbs W, start window). A pair of one
        replica's microbatches j1 (F) and j2 (I) needs j2 < j1 under the microbatch order
        (F(j1) precedes F(j2) and so I(j2) for j2 >= j1); a window must fit both ops."""
        si, graph, inst, scale = self.si, self.graph, self.inst, self.scale
        out: list[tuple[Op, Op, int, bool, tuple[int, int]]] = []
        if si.segments > 1:
            return out  # pairs of sequence-segment units are not modelled (whole-unit durations)
        for d in range(si.devices):
            for a, b, x in graph.pair_options(d):
                for absorbs in (False, True):
                    work = inst.F[a] + inst.I[b] + (inst.W[b] if absorbs else 0.0)
                    length = scale.t(x * work)
                    for j1 in si.microbatches_of(a):
                        for j2 in si.microbatches_of(b):
                            if j1 == j2 or (self.symmetry and not graph.open
                                            and si.replica_of(a) == si.replica_of(b)
                                            and j2 > j1):
                                continue
                            fwd, bwd = Op(Kind.F, a, j1), Op(Kind.I, b, j2)
                            tail = max(self.ht.tail[fwd], self.ht.tail[bwd])
                            lo = max(dom[fwd][0], dom[bwd][0])
                            hi = min(dom[fwd][1], dom[bwd][1], self.horizon - length - int(tail))
                            if lo <= hi:
                                out.append((fwd, bwd, length, absorbs, (lo, hi)))
        return out

    def _add_pair(self, fwd: Op, bwd: Op, length: int, absorbs: bool, window) -> None:
        model = self.model
        present = model.new_bool_var(f"pair{fwd}{bwd}{'B' if absorbs else ''}")
        start = model.new_int_var(window[0], window[1], f"pairstart{fwd}{bwd}")
        interval = model.new_optional_fixed_size_interval_var(start, length, present,
                                                              f"pi{fwd}{bwd}")
        members = (fwd, bwd) + ((bwd._replace(kind=Kind.W),) if absorbs else ())
        for op in members:
            model.add(self.start[op] == start).only_enforce_if(present)
            model.add(self.end_var[op] == start + length).only_enforce_if(present)
        self.pairs.append(PairChoice(fwd, bwd, absorbs, length, present, start, interval))

    def modes(self) -> None:
        """Ensures every unit runs in exactly one memory mode: keep, or one the instance
        offers, whose ops (R on the compute stream; O and L on the copy stream) are optional
        intervals present with the mode's literal, placed after and before what the task
        graph's form with that mode says (F before them, them before the backward)."""
        model = self.model
        for unit in (self.graph.units() if self.mode_graphs else ()):
            lits = []
            bw = self.graph.backward(*unit)
            keep_preds = set(self.graph.preds(bw))
            lo = int(list(self.start[Op(Kind.F, *unit)].proto.domain)[0]) \
                + self.dur[Op(Kind.F, *unit)]
            hi = int(list(self.start[bw].proto.domain)[-1])
            for mode, g in self.mode_graphs.items():
                lit = model.new_bool_var(f"{mode}{unit}")
                starts, intervals = {}, {}
                for op in g.mode_ops(*unit):
                    dur = int(g.duration(op))
                    starts[op] = model.new_int_var(min(lo, hi - dur), hi - dur, str(op))
                    intervals[op] = model.new_optional_fixed_size_interval_var(
                        starts[op], dur, lit, f"i{op}")

                def end(op: Op, starts=starts, g=g):
                    return starts[op] + int(g.duration(op)) if op in starts else self.end(op)

                for op in starts:
                    for pred, delay in g.preds(op):
                        model.add(starts[op] >= end(pred) + int(delay)).only_enforce_if(lit)
                for pred, delay in g.preds(bw):
                    if (pred, delay) not in keep_preds:
                        model.add(self.start[bw] >= end(pred) + int(delay)).only_enforce_if(lit)
                lits.append(lit)
                self.mode_choices.append(ModeChoice(unit, mode, lit, starts, intervals))
            keep = self.keep_lit[unit] = model.new_bool_var(f"keep{unit}")
            model.add_exactly_one([keep, *lits])

    def pairs_exclusive(self) -> None:
        """Ensures each op runs exactly once: alone or in one of its pairs."""
        member: dict[Op, list[cp_model.IntVar]] = {op: [] for op in self.solo}
        for c in self.pairs:
            member[c.forward].append(c.present)
            member[c.backward].append(c.present)
            if c.with_weight:
                member[c.backward._replace(kind=Kind.W)].append(c.present)
        for op, lits in member.items():
            self.model.add(sum(lits) + self.solo[op] == 1)

    def precedences(self, order: Iterable[Sequence[Op]]) -> None:
        """Ensures every op starts after its predecessors end plus the hand-off delay, and
        the caller's kept sequences stay in order. An absorbed W (inside a fused-B pair) has
        no edge from its I: the pair runs them as one op."""
        for op in self.ops:
            for pred, delay in self.graph.preds(op):
                c = self.model.add(self.start[op] >= self.end(pred) + int(delay))
                if op.kind == Kind.W and op in self.solo:
                    c.only_enforce_if(self.solo[op])
        for seq in order:
            for a, c in zip(seq, seq[1:]):
                self.model.add(self.start[c] >= self.end(a))

    def microbatch_order(self) -> None:
        """Ensures interchangeable microbatches run in order per (kind, stage, segment)."""
        for op in self.ops:
            prev = self.graph.same_class_prev(op)
            if prev is not None:
                self.model.add(self.start[op] >= self.end(prev))

    def devices(self, redundant: bool, memory_model: str) -> None:
        """Ensures a device runs one op at a time and its memory fits (its lifetimes and
        resident weights under its limit), and defines its first start and last end."""
        si, graph, model = self.si, self.graph, self.model
        streams: dict[tuple[int, int], list[cp_model.IntervalVar]] = {}
        for c in self.mode_choices:  # R with the device's compute, copies on their streams
            for op, interval in c.interval.items():
                streams.setdefault((graph.device(op), graph.stream(op)), []).append(interval)
        for d in range(si.devices):
            dev_ops = list(graph.device_ops(d))
            exact = d not in self.relaxed
            if exact:
                model.add_no_overlap([self.interval[op] for op in dev_ops]
                                     + [c.interval for c in self.pairs
                                        if graph.device(c.forward) == d]
                                     + streams.get((d, COMPUTE), []))
            for (dd, stream), intervals in streams.items():
                if exact and dd == d and stream != COMPUTE:
                    model.add_no_overlap(intervals)
            f = model.new_int_var(0, self.horizon, f"first{d}")
            e = model.new_int_var(0, self.horizon, f"last{d}")
            # A device's first op is an F and its last a W or B (every backward of d follows an
            # F of d, and every op of d is followed by its unit's last op), so only those link.
            fwds = [op for op in dev_ops if op.kind == Kind.F]
            lasts = [op for op in dev_ops if op.kind != Kind.F and op == graph.last_op(*op.unit)]
            for op in fwds:
                model.add(f <= self.start[op])
            for op in lasts:
                model.add(e >= self.end(op))
            self.derived += [
                Derived(f, lambda at, _, ops=fwds: min(at(op, START) for op in ops)),
                Derived(e, lambda at, _, ops=lasts: max(at(op, END) for op in ops))]
            # In microbatch order the first op is the first forward of the device's lowest
            # stage in some replica: exact when there is one such candidate.
            leads = _leads(si, d)
            ordered = self.symmetry and not graph.open  # open view: only first forwards ordered
            if ordered:
                if len(leads) == 1:
                    model.add(f == self.start[leads[0]])
                else:
                    model.add_min_equality(f, [self.start[op] for op in leads])
            if redundant:
                model.add(e >= f + int(math.ceil(graph.device_min_work(d) - 1e-9)))
            if self.symmetry:
                _add_memory_precedences(model, si, d, self.start, self.end)
            self.first.append(f)
            self.last.append(e)
            if not exact:
                continue
            if self.mode_graphs:
                self._memory_with_modes(d, memory_model)
            else:
                _add_memory(model, si, graph, d, self.start, self.end, self.dur, self.horizon,
                            memory_model, self.derived)
                k = self._binding_stair(d) if redundant else None
                if k is not None:
                    _add_dual_feasible_memory(model, si, graph, d, self.start, self.end,
                                              self.horizon, k, self.derived)

    def _binding_stair(self, d: int) -> int | None:
        """The k of device d's staircase memory-time (``bounds.memory_stairs``) where that
        bound, from the device's head for the makespan, is the instance's analytic bound:
        there the cumulative of ``_add_dual_feasible_memory`` states what bounds the
        instance. Elsewhere it would only grow the model (the random family has a staircase
        above the plain memory-time on most devices, binding on none but random-tight-00)."""
        if self.si.limit[d] is None:
            return None
        stair = memory_stairs(self.si)[d]
        if stair is None:
            return None
        if self.analytic is None:
            self.analytic = analytic_bound(self.si, self.objective_name)
        head = self.graph.device_heads()[d] if self.objective_name == "makespan" else 0.0
        return stair[0] if head + stair[1] >= self.analytic * (1 - 1e-9) else None

    def _mode_lifetimes(self, d: int) -> list[tuple[cp_model.LinearExprT, cp_model.LinearExprT,
                                                    int, cp_model.IntVar]]:
        """Device d's memory lifetimes when modes are chosen: (born, dies, amount, literal) for
        every mode's lifetimes of every unit (the graph of that mode says them), each present
        with its mode's literal."""
        items: list[tuple[Lifetime, cp_model.IntVar, ModeChoice | None]] = []
        for s in self.si.stages_of(d):
            for j in self.si.microbatches_of(s):
                for g in range(self.graph.segments):
                    items += [(lt, self.keep_lit[(s, j, g)], None)
                              for lt in self.graph.lifetimes(s, j, g)]
        for c in self.mode_choices:
            if self.graph.device(Op(Kind.F, *c.unit)) == d:
                items += [(lt, c.present, c) for lt in self.mode_graphs[c.mode].lifetimes(*c.unit)]

        def at(op: Op, edge: int, c: ModeChoice | None):
            if c is not None and op in c.start:
                v = c.start[op]
                return v if edge == START else v + int(self.graph.duration(op))
            return self.start[op] if edge == START else self.end(op)

        # amounts a share makes fractional: rounded up
        return [(at(lt.born, lt.born_at, c), at(lt.dies, lt.dies_at, c),
                 math.ceil(lt.amount - 1e-9), lit) for lt, lit, c in items]

    def _mode_intervals(self, d: int) -> tuple[list[cp_model.IntervalVar], list[int]]:
        """``_mode_lifetimes`` as optional intervals with their amounts (for a cumulative)."""
        intervals, demands = [], []
        for born, dies, amount, lit in self._mode_lifetimes(d):
            size = self.model.new_int_var(0, self.horizon, "life")
            intervals.append(self.model.new_optional_interval_var(born, size, dies, lit, "mem"))
            demands.append(amount)
        return intervals, demands

    def _memory_with_modes(self, d: int, memory_model: str) -> None:
        """Device d's memory under its limit when modes are chosen (``_mode_lifetimes``)."""
        si, model = self.si, self.model
        limit = si.limit[d]
        if limit is None:
            return
        cap = int(limit - si.resident(d))
        if cap >= sum(math.ceil(lt.amount) for lt in self.graph.device_lifetimes(d)):
            return  # no unit ever holds more than its keep lifetimes
        if memory_model == "reservoir":
            times, changes, actives = [], [], []
            for born, dies, amount, lit in self._mode_lifetimes(d):
                times += [born, dies]
                changes += [amount, -amount]
                actives += [lit, lit]
            model.add_reservoir_constraint_with_active(times, changes, actives, 0, cap)
        else:
            model.add_cumulative(*self._mode_intervals(d), cap)

    def step_tails(self, redundant: bool) -> None:
        """Ensures each device runs its optimizer steps one at a time after its last pipeline
        op (the tail rule, ``zbsolve.graph``), and moves the device's end past them."""
        model = self.model
        for d in range(self.si.devices):
            tail = list(self.graph.tail_ops(d))
            pipeline_end = self.last[d]
            for op in tail:
                model.add(self.start[op] >= pipeline_end)
            if len(tail) > 1:
                model.add_no_overlap([self.interval[op] for op in tail])
            e = model.new_int_var(0, self.horizon, f"step_end{d}")
            model.add(e >= pipeline_end)
            for op in tail:
                model.add(e >= self.end(op))
            self.derived.append(Derived(e, lambda at, known, ops=tail, p=pipeline_end: max(
                [known[p.index], *(at(op, END) for op in ops)])))
            if redundant:
                model.add(e >= pipeline_end + sum(self.dur[op] for op in tail))
            self.last[d] = e

    def memory_peaks(self) -> None:
        """Ensures ``peaks[d]`` bounds device d's memory (resident + live lifetimes) at every
        instant, under its limit: a cumulative whose capacity is that variable."""
        si, graph, model = self.si, self.graph, self.model
        self.peaks, self.peak_tops = [], []
        for d in range(si.devices):
            intervals, demands = (self._mode_intervals(d) if self.mode_graphs else
                                  _lifetime_intervals(model, graph, d, self.start, self.end,
                                                      self.dur, self.horizon, self.derived))
            resident = int(si.resident(d))
            top = sum(demands) + resident
            if si.limit[d] is not None:
                top = min(top, int(si.limit[d]))
            peak = model.new_int_var(resident, max(resident, top), f"peak{d}")
            model.add_cumulative(intervals, demands, peak - resident)
            self.peaks.append(peak)
            self.peak_tops.append(max(resident, top))

    def _memory_objective(self) -> cp_model.LinearExpr:
        """Fullest device relative to its limit (to 1/FULLNESS_STEPS), then the sum of peaks;
        a device without a limit is measured against its least possible need."""
        si, model = self.si, self.model
        need = min_memory_limit(si)
        refs = [max(1, int(lim if lim is not None else n)) for lim, n in zip(si.limit, need)]
        top = max(-(-FULLNESS_STEPS * t // r) for t, r in zip(self.peak_tops, refs))
        z = model.new_int_var(0, top, "fullness")
        for peak, ref in zip(self.peaks, refs):
            model.add(ref * z >= FULLNESS_STEPS * peak)
        return (sum(self.peak_tops) + 1) * z + sum(self.peaks)

    def objective(self, redundant: bool, upper_bound: int | None,
                  lower_bound: int = 0) -> ScheduleModel:
        """Defines the objective (makespan, or longest device span) and minimizes it (or, with
        ``memory_peaks``, keeps it <= ``upper_bound`` and minimizes memory)."""
        si, model = self.si, self.model
        if redundant and self.analytic is None:
            self.analytic = analytic_bound(si, self.objective_name)
        lb = int(math.ceil(self.analytic - 1e-9)) if redundant else 0
        lb = max(lb, int(lower_bound))
        obj = model.new_int_var(lb, self.horizon, self.objective_name)
        if self.objective_name == "makespan":
            implicit = list(self.graph.implicit_ops())
            ends = list(self.last) + [self.end(op) for op in implicit]
            model.add_max_equality(obj, ends)
            self.derived.append(Derived(obj, lambda at, known: max(  # a list: p may be 1
                [*(known[v.index] for v in self.last), *(at(op, END) for op in implicit)])))
        else:
            # a span runs from the device's head, a constant (``TaskGraph.device_heads``): a
            # late first start does not shorten it, so the objective is regular
            spans = []
            heads = [int(round(h)) for h in self.graph.device_heads()]  # integer times
            for d, h in enumerate(heads):
                sp = model.new_int_var(0, self.horizon, f"span{d}")
                model.add(sp == self.last[d] - h)
                spans.append(sp)
                self.derived.append(Derived(sp, lambda at, known, e=self.last[d], h=h:
                                            known[e.index] - h))
            model.add_max_equality(obj, spans)
            self.derived.append(Derived(obj, lambda at, known: max(known[v.index] for v in spans)))
        if upper_bound is not None:
            model.add(obj <= int(upper_bound))
        model.minimize(obj if self.peaks is None else self._memory_objective())
        return ScheduleModel(model, self.inst, si, self.graph, self.scale, self.objective_name,
                             self.horizon, self.start, self.interval, self.first, self.last,
                             obj, lb, {"ops": len(self.ops), "horizon": self.horizon,
                                       "pair_choices": len(self.pairs),
                                       "mode_choices": len(self.mode_choices)},
                             pairs=self.pairs, solo=self.solo, end_var=self.end_var,
                             modes=self.mode_choices, derived=self.derived)


def _leads(si: Instance, d: int) -> list[Op]:
    """Per replica, the first forward of the device's lowest stage of that replica."""
    lowest: dict[int, int] = {}
    for s in si.stages_of(d):
        lowest.setdefault(si.replica_of(s), s)
    return [Op(Kind.F, s, si.microbatches_of(s)[0]) for s in lowest.values()]


def _boundary(start: dict[Op, cp_model.IntVar], end: Callable[[Op], cp_model.LinearExprT]
              ) -> Callable[[Op, int], cp_model.LinearExprT]:
    """An op's START or END in the model: its start variable, or ``end(op)`` (a variable where
    a pair may end the op early)."""
    return lambda op, edge: start[op] if edge == START else end(op)


def _add_memory(
    model: cp_model.CpModel,
    si: Instance,
    graph: TaskGraph,
    d: int,
    start: dict[Op, cp_model.IntVar],
    end,
    dur: dict[Op, int],
    horizon: int,
    memory_model: str,
    derived: list[Derived] | None = None,
) -> None:
    """Memory of device d against its limit (nothing when the limit can never bind)."""
    limit = si.limit[d]
    if limit is None:
        return
    lifetimes = list(graph.device_lifetimes(d))
    cap = int(limit - si.resident(d))
    if cap >= sum(int(lt.amount) for lt in lifetimes):
        return

    at = _boundary(start, end)
    if memory_model == "reservoir":
        times, changes = [], []
        for lt in lifetimes:
            times += [at(lt.born, lt.born_at), at(lt.dies, lt.dies_at)]
            changes += [int(lt.amount), -int(lt.amount)]
        model.add_reservoir_constraint(times, changes, 0, cap)
        return
    intervals, demands = _lifetime_intervals(model, graph, d, start, end, dur, horizon, derived)
    model.add_cumulative(intervals, demands, cap)


def _lifetime_intervals(model: cp_model.CpModel, graph: TaskGraph, d: int,
                        start: dict[Op, cp_model.IntVar], end, dur: dict[Op, int], horizon: int,
                        derived: list[Derived] | None = None
                        ) -> tuple[list[cp_model.IntervalVar], list[int]]:
    """One interval per memory lifetime of device d (born at F's start, dead at I's, W's or
    B's end: ``end(op)``, a variable where the op may run in a pair), with its amount; each
    length goes into ``derived`` (it completes a hint)."""
    at = _boundary(start, end)
    intervals, demands = [], []
    for lt in graph.device_lifetimes(d):
        born, dies = at(lt.born, lt.born_at), at(lt.dies, lt.dies_at)
        min_size = dur[lt.born] if lt.born_at == START and not graph.overlap else 0
        size = model.new_int_var(min_size, horizon, f"life{lt.dies}")
        intervals.append(model.new_interval_var(born, size, dies, f"mem{lt.dies}"))
        if derived is not None:
            derived.append(Derived(size, lambda at, _, lt=lt: at(lt.dies, lt.dies_at)
                                   - at(lt.born, lt.born_at)))
        demands.append(int(lt.amount))
    return intervals, demands


def _add_dual_feasible_memory(model: cp_model.CpModel, si: Instance, graph: TaskGraph, d: int,
                              start: dict[Op, cp_model.IntVar], end, horizon: int, k: int,
                              derived: list[Derived]) -> None:
    """Redundant with device d's memory: each unit's held amount (all of it from its forward's
    start to its first free, then what is left until the next) weighed by the staircase u^(k)
    (``dual_feasible.stair_units``; ``bounds.memory_stairs`` picks k) under a capacity of k.
    The memory cumulative implies it (dual
    feasibility: shares that fit weigh at most 1); it states outright that a unit which leaves
    room for no other (q = k) excludes every other one, and its energy is the bound's
    (docs/solver.md, "Memory-time weighed by a dual feasible function")."""
    cap = int(si.limit[d] - si.resident(d))
    if cap <= 0:
        return
    at = _boundary(start, end)
    units: dict[Op, list[Lifetime]] = {}
    for lt in graph.device_lifetimes(d):
        units.setdefault(lt.born, []).append(lt)
    intervals, demands = [], []
    for born, pieces in units.items():
        pieces.sort(key=lambda lt: lt.dies.kind == Kind.W)  # its I (or B) frees first
        held = sum(int(lt.amount) for lt in pieces)
        since = (born, START)
        for lt in pieces:
            q = dual_feasible.stair_units(held, cap, k)
            if q > 0:
                a, b = since, (lt.dies, lt.dies_at)
                size = model.new_int_var(0, horizon, f"dff{lt.dies}")
                intervals.append(model.new_interval_var(at(*a), size, at(*b), f"dffi{lt.dies}"))
                demands.append(q)
                derived.append(Derived(size, lambda at, _, a=a, b=b: at(*b) - at(*a)))
            since, held = (lt.dies, lt.dies_at), held - int(lt.amount)
    if intervals:
        model.add_cumulative(intervals, demands, k)


def _add_memory_precedences(model: cp_model.CpModel, si: Instance, d: int,
                            start: dict[Op, cp_model.IntVar],
                            end: Callable[[Op], cp_model.LinearExprT]) -> None:
    """Redundant precedences implied by memory (valid with the microbatch-order symmetry);
    ``end``: an op's end (a variable where a pair may end it early)."""
    for e in memory_edges(si, d):
        for j in si.microbatches_of(e.source):
            if j + e.lag >= si.microbatches:
                break
            model.add(start[Op(Kind.F, e.stage, j + e.lag)] >= end(Op(e.kind, e.source, j)))
