"""The task graph: the instance expanded into ops; the one definition of the work.

Every layer reads it and none restates it: the simulator (what waits for what, when memory is
held), the bounds (heads and tails), the greedy and list schedulers, the CP-SAT model (exact
and LNS windows), the lowering to executor tables (which hand-offs cross devices), the P2P
check and the runner (where a tensor comes from and goes to).

Ops and their form
------------------
A *unit* is (stage, microbatch, segment): one piece of work whose forward F and backward run on
the stage's device. Its backward runs split, I (input gradient, what the previous stage waits
for) then W (weight gradient, needed by nobody but the step's end), or fused as one B that hands
the input gradient on only when it ends (a runtime without the I/W split). The *form* says
which units are fused; ``TaskGraph.of(inst, schedule)`` reads it off a schedule's ops, and
``TaskGraph(inst)`` is the split form the solver optimizes. Stage r·S + s is replica r's copy
of model stage s (``Instance``); it runs the microbatches j with j mod replicas = r.

Dependencies (chain of one replica: stages base .. base+S-1; "bw" = I or B by form)
  F(s, j, g)  <- F(s-1, j, g) [hand-off]   and F(s, j, g-1) [the prefix's keys/values]
  bw(last)    <- F(last, j, g)             and bw(last, j, g+1)
  bw(s, j, g) <- bw(s+1, j, g) [hand-off]  and bw(s, j, g+1) [gradients of later segments]
  W(s, j, g)  <- I(s, j, g)
  SYNC(s)     <- W or B of every unit of both copies of model stage s (replicas = 2 only)
  (the step boundary's jobs, when ``inst.step.mode`` is not none: see below)
A hand-off between stages of different devices waits ``comm``; everything else waits 0.
Segments (g) are 0 .. segments-1; with one segment the segment edges vanish.

Memory modes (``zbsolve.modes``)
-------------------------------
A unit's *mode* is a form too: keep (the default), recompute / selective (an op R / RS on the
device's compute stream) or offload (a copy O out and a copy L back on its copy stream). The
modes' ops hang off the unit:
  R(s, j, g)  <- F(s, j, g)      bw(s, j, g) <- R(s, j, g)      (RS alike)
  O(s, j, g)  <- F(s, j, g)      L(s, j, g) <- O(s, j, g)       bw(s, j, g) <- L(s, j, g)
``TaskGraph(inst, modes=...)`` takes them (default keep), ``TaskGraph.of`` reads them off a
schedule's ops (an R op means recompute, O and L mean offload). ``TaskGraph(inst)`` of an
instance that offers modes is the solver's *open* view: every unit in its keep form, the modes
still to be chosen (``same_class_prev`` then keeps only the symmetry every choice keeps).

Memory
------
Each unit's activation is a set of lifetimes on its device: split, activation - weight lives
from F's start to I's end and weight from F's start to W's end; fused, the activation lives
from F's start to B's end. With segments, a unit's activation is its segment's share
(``Instance.segment_memory``), and the keys and values later segments read are part of it: they
live until the unit's I (or B), which the segment edges above put after every later segment's.
Recompute: F frees all but ``kept`` when it ends, R re-allocates the rest at its start.
Offload: O frees the moved share when it ends, L re-allocates it at its start. In every
mode the unit holds its whole activation from F's start and from its backward's start (R
or L before it), and ``weight`` from I's end to W's end. A device also holds ``params``
of its stages all step long. The simulator turns lifetimes into events; the CP-SAT model
turns them into cumulative intervals.

Jobs
----
A device runs jobs in order: an op, or an overlapped pair (``ops.Pair``: a forward and a
backward of different microbatches and stages of the device, allowed by ``overlap``, lasting
x times their sum). A SYNC job runs on no device: it starts as soon as its inputs are done.

The step boundary
-----------------
With ``inst.step.mode`` sync or post-validation (``zbsolve.step``; none adds nothing, so every
published figure stays as it is) the step ends with these jobs (s: model stage, t: graph stage):
  AR(s)      <- SYNC(s) with replicas, else the W or B of every unit of s   [implicit]
  sync:            CHECK <- every AR(s)   [implicit]       OPT(t) <- CHECK
  post-validation: NORM(t) <- AR(t mod S) and NORM(t-1) [hand-off] along t's chain, from its
                   first stage to its last   [implicit]    OPT(t) <- AR(t mod S)
Durations: AR = ``allreduce``, CHECK = ``check``, OPT = ``optimizer``, NORM = 0 (adding two
numbers; the hop between devices costs ``comm``).

Which jobs occupy a device. The reductions (AR, CHECK) and the partial-state hops (NORM) are
communication: they run on no device's compute, as SYNC, and start when their inputs are done.
The optimizer step is compute on the stage's device, and it is placed by one rule every layer
shares (the *tail rule*), so schedules, files, executor tables and the hand-made generators list
the pipeline's jobs only: **a device runs its OPT jobs after the last job of its order, earliest
ready first (ties: lower stage first)**. Nothing waits for an OPT, so the order among them only
decides when the device ends, and earliest-ready-first is optimal for that on one device (the
CP-SAT model lets them float in a NoOverlap after the device's last job and reaches the same
end). With one stage per device the rule is exactly "right after the stage's last W"; with
several, a stage whose W end early still steps after the device's other stages' W (a free
placement could fill an idle gap with it; the rule keeps every file format unchanged).

What post-validation puts on the critical path. Each stage steps speculatively after its own
reduction and waits for nobody. The partial norm/NaN state travels along the pipeline from the
first stage to the last (the paper's direction, and the order in which the stages of the
parallelogram schedules it exists for finish), so the last stage holds the global state at
NORM(last). From there the verdict returns to the earlier stages during the next step's
warm-up; a stage needs it only before its next optimizer step (a rollback, rare, also redoes
what ran on the speculative weights; not priced). So the step is over, and known good, when
every OPT and NORM(last) have ended: NORM(last) is in the makespan, and in no device's span
(no device waits for it in this step); the return trip is in the next step's warm-up, off the
critical path. (``zbsolve.runtime`` waits for the verdict at the end of the step instead, so its
measured post-validation step also holds that return trip: S-1 hops of a two-number message.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from zbsolve.instance import Instance
from zbsolve.modes import KIND_MODE, MODE_OPS, Mode
from zbsolve.numeric import exceeds
from zbsolve.ops import Kind, Op, Pair

START, END = 0, 1
"""Which boundary of an op a memory event happens at."""

# The kinds as plain strings: the simulator and the schedulers call ``preds`` / ``succs`` for
# every op, and an enum member's attribute lookup costs four times a string comparison there.
F, I, W, B, SYNC = (k.value for k in (Kind.F, Kind.I, Kind.W, Kind.B, Kind.SYNC))  # noqa: E741
R, RS, O, L = "R", "RS", "O", "L"
KEEP = Mode.KEEP.value
COMPUTE, COPY_OUT, COPY_IN = 0, 1, 2
"""Streams of a device: its compute stream, and its copy stream(s) (one, or one per direction)."""

Unit = tuple[int, int, int]
_MODE_FIELDS = {"recompute": "recompute: {R, kept}",
                "selective": "recompute: {R_selective, kept_selective}",
                "offload": "offload: {fraction, d2h}"}
AR, CHECK, NORM, OPT = (k.value for k in (Kind.AR, Kind.CHECK, Kind.NORM, Kind.OPT))
_NO_DEVICE = frozenset((SYNC, AR, CHECK, NORM))  # implicit kinds: no device runs them
_STEP_KINDS = frozenset((AR, CHECK, NORM, OPT))  # the step boundary's (durations from inst.step)
GLOBAL_CHECK = Op(CHECK, -1, -1)


class Lifetime(NamedTuple):
    """``amount`` of memory held on ``device`` from ``born``'s boundary to ``dies``'s."""

    device: int
    amount: float
    born: Op
    born_at: int  # START or END
    dies: Op
    dies_at: int


@dataclass(frozen=True)
class Handoff:
    """A tensor that crosses devices: ``src`` op's output is ``dst`` op's input."""

    src: Op
    dst: Op
    delay: float

    @property
    def direction(self) -> str:
        """"F" (an activation, forward) or "B" (an input gradient, backward)."""
        return "F" if self.src.kind == Kind.F else "B"


def _pair_fits(inst: Instance, forward_stage: int, backward_stage: int) -> bool:
    """Whether the device's limit can hold a pair of F(forward_stage, j) and a backward of
    (backward_stage, i) as the pair starts. Microbatch i then holds the whole activation of
    each of its stages on the device up to backward_stage (their forwards ran, their
    backwards wait for this one), and microbatch j (another one: its forward and backward on
    those stages are ordered) those up to forward_stage, the one allocated at the pair's start
    included; on top of the device's resident weights. Where that exceeds the limit no
    schedule runs the pair, so the bounds must not count its ops at the pair's share
    (``min_duration``).

    Why: at tight memory the pairs a DualPipe-like instance allows never happen, and counting
    every op at x of its duration left the bound far below the optimum (a two-device loop whose
    devices hold one microbatch's two stages at a time: 17.75 against a proven 34, which the
    same instance without overlap bounds at 33). Only for whole units (one segment, no memory
    modes), whose activation is held whole from F's start to the end of its I or fused B."""
    d = inst.placement[forward_stage]
    limit = inst.limit[d]
    if limit is None or inst.segments != 1 or inst.offers_modes:
        return True
    S = inst.model_stages
    held = inst.resident(d) + sum(
        inst.activation[t] for top in (forward_stage, backward_stage)
        for t in inst.stages_of(d) if top - top % S <= t <= top)
    return not exceeds(held, limit)


class TaskGraph:
    """Ops, dependencies, durations, devices and memory of one instance in one form."""

    def __init__(self, inst: Instance, fused: Iterable[tuple[int, int, int]] | bool = (),
                 modes: Mapping[Unit, str] | str | None = None):
        self.inst = inst
        self._init_modes(inst, modes)
        self.all_fused = fused is True
        self.fused = frozenset() if isinstance(fused, bool) else frozenset(fused)
        S = inst.model_stages
        self.first = tuple(s - s % S for s in range(inst.stages))  # first stage of s's chain
        self.last = tuple(f + S - 1 for f in self.first)
        self.segments = getattr(inst, "segments", 1)
        self.has_sync = inst.replicas > 1
        step = getattr(inst, "step", None)
        self.step_mode = step.mode if step is not None else "none"
        self.has_step = self.step_mode != "none"
        self.has_implicit = self.has_sync or self.has_step
        self.split = not self.all_fused and not self.fused  # every unit split: the fast path
        n = inst.stages
        self._down = tuple(inst.hop(s - 1, s) if s > 0 else 0.0 for s in range(n))  # s-1 -> s
        self._up = tuple(inst.hop(s + 1, s) if s + 1 < n else 0.0 for s in range(n))  # s+1 -> s
        self.overlap = inst.overlap is not None
        # stages whose W a pair may absorb (the unit's fused backward in a pair; whole units
        # only, as the model pairs them): their Ws keep no microbatch order (``same_class_prev``)
        self.absorbable: frozenset[int] = frozenset()
        if self.overlap:  # the smallest pair factor each stage can run under, as F / as backward
            fx, bx = [1.0] * n, [1.0] * n
            backward: set[int] = set()
            for d in range(inst.devices):
                for a, b, x in self.pair_options(d):
                    fx[a], bx[b] = min(fx[a], x), min(bx[b], x)
                    backward.add(b)
            self._min_x = (tuple(fx), tuple(bx))
            if self.segments == 1:
                self.absorbable = frozenset(backward)
        else:
            self.min_duration = self.duration  # no pairs: a job lasts its duration

    @staticmethod
    def of(inst: Instance, ops: Iterable[Op]) -> TaskGraph:
        """The form a schedule's ops use: a unit is fused where a B op appears, and runs in the
        mode its R, RS, O or L ops say (keep without any); ValueError on a unit with two."""
        ops = list(ops)
        return TaskGraph(inst, {op.unit for op in ops if op.kind == Kind.B}, modes_of_ops(ops))

    # ------------------------------------------------------------------ modes
    def _init_modes(self, inst: Instance, modes: Mapping[Unit, str] | str | None) -> None:
        """``modes``: None (every unit keep; the open view if the instance offers modes), one
        mode for every unit, or unit -> mode (absent units keep)."""
        self.open = modes is None and inst.offers_modes
        self.uniform_mode = modes if isinstance(modes, str) else None
        table = {} if modes is None or isinstance(modes, str) else dict(modes)
        self.modes: dict[Unit, str] = {u: m for u, m in table.items() if m != KEEP}
        if self.uniform_mode == KEEP:
            self.uniform_mode = None
        for mode in {self.uniform_mode, *self.modes.values()} - {None}:
            if mode not in inst.modes:
                raise ValueError(f"memory mode {mode!r} is not offered by the instance (it "
                                 f"offers {', '.join(inst.modes)}): add {_MODE_FIELDS[mode]} "
                                 "to the instance")
        self.has_modes = bool(self.modes) or self.uniform_mode is not None
        self.copy_streams = inst.offload.streams if inst.offload is not None else 0
        self._class_prev: dict[tuple[int, int], int | None] | None = None

    def mode(self, stage: int, mb: int, seg: int = 0) -> str:
        """The unit's memory mode (``zbsolve.modes``)."""
        if not self.has_modes:
            return KEEP
        return self.uniform_mode or self.modes.get((stage, mb, seg), KEEP)

    def mode_ops(self, stage: int, mb: int, seg: int = 0) -> tuple[Op, ...]:
        """The ops the unit's mode adds (R; RS; or O then L), in dependency order."""
        if not self.has_modes:
            return ()
        return tuple(Op(k, stage, mb, seg) for k in MODE_OPS[self.mode(stage, mb, seg)])

    def stream(self, op: Op) -> int:
        """The stream of its device an op runs on: COMPUTE, or a copy stream (COPY_OUT for
        every copy with one copy stream; COPY_IN for loads with two)."""
        kind = op[0]
        if kind == O:
            return COPY_OUT
        if kind == L:
            return COPY_IN if self.copy_streams == 2 else COPY_OUT
        return COMPUTE

    def copy_ops(self, device: int) -> Iterator[Op]:
        """The ops of a device's copy stream(s) (offload's O and L)."""
        if not self.has_modes or self.copy_streams == 0:
            return
        for s in self.inst.stages_of(device):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
                    for op in self.mode_ops(s, j, g):
                        if op[0] == O or op[0] == L:
                            yield op

    # ------------------------------------------------------------------ form
    def is_fused(self, stage: int, mb: int, seg: int = 0) -> bool:
        return self.all_fused or (stage, mb, seg) in self.fused

    def backward(self, stage: int, mb: int, seg: int = 0) -> Op:
        """The op that produces this unit's input gradient: B if fused, else I."""
        if self.split:
            return Op(I, stage, mb, seg)
        return Op(B if self.is_fused(stage, mb, seg) else I, stage, mb, seg)

    def last_op(self, stage: int, mb: int, seg: int = 0) -> Op:
        """The op that ends this unit: B if fused, else W."""
        return Op(B if self.is_fused(stage, mb, seg) else W, stage, mb, seg)

    def unit_ops(self, stage: int, mb: int, seg: int = 0) -> tuple[Op, ...]:
        """F, the mode's ops (if any), then B or I and W: a topological order of the unit."""
        f = Op(F, stage, mb, seg)
        extra = self.mode_ops(stage, mb, seg) if self.has_modes else ()
        if self.is_fused(stage, mb, seg):
            return (f, *extra, Op(B, stage, mb, seg))
        return (f, *extra, Op(I, stage, mb, seg), Op(W, stage, mb, seg))

    # ------------------------------------------------------------------ the ops
    def units(self) -> Iterator[tuple[int, int, int]]:
        """Every (stage, microbatch, segment), stage-major."""
        for s in range(self.inst.stages):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
                    yield (s, j, g)

    def ops(self) -> Iterator[Op]:
        """Every op of this form: the device ops, the implicit ones (SYNC, the step's
        reductions), then the tail ops (the step's optimizer steps)."""
        for unit in self.units():
            yield from self.unit_ops(*unit)
        yield from self.implicit_ops()
        yield from self.tail_ops()

    def implicit_ops(self) -> Iterator[Op]:
        """Ops no device runs (the simulator starts them when their inputs are done), in a
        topological order."""
        if self.has_sync:
            for s in range(self.inst.model_stages):
                yield Op(Kind.SYNC, s, -1)
        if self.has_step:
            yield from self._step_implicit_ops()

    def _step_implicit_ops(self) -> Iterator[Op]:
        S = self.inst.model_stages
        for s in range(S):
            yield Op(AR, s, -1)
        if self.step_mode == "sync":
            yield GLOBAL_CHECK
            return
        for base in range(0, self.inst.stages, S):  # each replica's chain, first stage first
            for t in range(base, base + S):
                yield Op(NORM, t, -1)

    def tail_ops(self, device: int | None = None) -> Iterator[Op]:
        """The step's optimizer steps (of ``device``, or of all): device jobs that no schedule
        lists; every device runs its own after its order (the tail rule, module docstring)."""
        if not self.has_step:
            return
        stages = range(self.inst.stages) if device is None else self.inst.stages_of(device)
        for t in stages:
            yield Op(OPT, t, -1)

    def device_ops(self, device: int) -> Iterator[Op]:
        """The ops of a device's compute stream (its copies: ``copy_ops``)."""
        for s in self.inst.stages_of(device):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
                    if self.has_modes:
                        yield from (op for op in self.unit_ops(s, j, g)
                                    if op[0] != O and op[0] != L)
                    else:
                        yield from self.unit_ops(s, j, g)

    def topological(self, mbs: Iterable[int] | None = None, implicit: bool = True) -> list[Op]:
        """A topological order: microbatch by microbatch, each a forward then a backward sweep
        (a microbatch's ops before the next one's, as the microbatch-order chains need).
        ``mbs``: only those microbatches; ``implicit``: the implicit ops at the end."""
        order: list[Op] = []
        S, R = self.inst.model_stages, self.inst.replicas
        for j in range(self.inst.microbatches) if mbs is None else mbs:
            base = (j % R) * S
            chain = range(base, base + S)
            for g in range(self.segments):
                order += [Op(Kind.F, s, j, g) for s in chain]
            for g in reversed(range(self.segments)):
                for s in reversed(chain):
                    order += self.unit_ops(s, j, g)[1:]
        if implicit:
            order += self.implicit_ops()
            order += self.tail_ops()
        return order

    def count(self) -> int:
        """How many ops ``ops()`` yields (without walking them)."""
        inst = self.inst
        units = inst.stages * (inst.microbatches // inst.replicas) * self.segments
        fused = units if self.all_fused else len(self.fused)
        extra = 0
        if self.has_modes:
            extra = (units * len(MODE_OPS[self.uniform_mode]) if self.uniform_mode
                     else sum(len(MODE_OPS[m]) for m in self.modes.values()))
        step = 0
        if self.has_step:  # AR per model stage, CHECK or NORM per stage, OPT per stage
            checks = 1 if self.step_mode == "sync" else inst.stages
            step = inst.model_stages + checks + inst.stages
        return 3 * units - fused + extra + (inst.model_stages if self.has_sync else 0) + step

    def exists(self, op: Op) -> bool:
        """Whether ``op`` is an op of this graph (kind, stage, microbatch, segment and form)."""
        inst = self.inst
        if op.kind == Kind.SYNC:
            return self.has_sync and 0 <= op.stage < inst.model_stages and op.mb == -1 \
                and op.seg == 0
        if op.kind in _STEP_KINDS:
            return self.has_step and op in set(self.implicit_ops()) | set(self.tail_ops())
        if op.kind not in (Kind.F, Kind.I, Kind.W, Kind.B) and op.kind not in KIND_MODE:
            return False
        if not (0 <= op.stage < inst.stages and 0 <= op.seg < self.segments):
            return False
        if op.mb not in inst.microbatches_of(op.stage):
            return False
        if op.kind == Kind.F:
            return True
        if op.kind in KIND_MODE:
            return op in self.mode_ops(*op.unit)
        return (op.kind == Kind.B) == self.is_fused(*op.unit)

    # ------------------------------------------------------------------ per op
    def device(self, op: Op) -> int | None:
        """The device that runs ``op`` (None for implicit ops)."""
        return None if op[0] in _NO_DEVICE else self.inst.placement[op[1]]

    def duration(self, op: Op) -> float:
        """The op's time: its segment's share of its stage's F, I, W or B (``Instance``); a step
        job's from ``inst.step``."""
        if op[0] in _STEP_KINDS:
            return self._step_duration(op)
        return self.inst.duration(op[0], op[1], op[3])

    def _step_duration(self, op: Op) -> float:
        step, kind = self.inst.step, op[0]
        if kind == OPT:
            return step.opt_time(op[1])
        if kind == AR:
            return step.reduce_time(op[1])
        return step.check if kind == CHECK else 0.0  # NORM: the hop is the edge's delay

    def is_tail(self, op: Op) -> bool:
        """Whether ``op`` is a tail op (an optimizer step, placed by the tail rule)."""
        return op[0] == OPT

    def min_duration(self, op: Op) -> float:
        """A lower bound on the time from ``op``'s start to its end in any job: its duration,
        or x times it where it may run in an overlapped pair of factor x (the pair lasts
        x (F + B) >= x F, and its backward ends with it). A W too: a schedule may fuse its unit
        and pair the fused backward, x (F + I + W), which holds the W for x W (the solver's
        model does: an absorbing pair). Bounds use this, so they stay valid when the solver
        may pair ops."""
        if op[0] != F and op[0] != I and op[0] != B and op[0] != W:
            return self.duration(op)  # SYNC and the modes' ops never run in a pair
        fx, bx = self._min_x
        return self.duration(op) * (fx if op[0] == F else bx)[op[1]]

    def device_heads(self) -> list[float]:
        """Per device, the earliest its first op can start: where its span is measured from.

        A constant of the instance, not of a schedule, so that a span is a regular objective
        (it only grows with the ends): a device that starts late gains nothing, and every
        layer (simulator, model, bounds, searches) measures the same thing. The first op is a
        forward (every other op waits for its unit's forward); the earliest is the longest
        path of forwards and hand-off delays to a first microbatch of one of its stages.
        Full durations, not ``min_duration``: before a device's first op no backward has run
        (a backward waits for its microbatch's forward on every stage of its replica, and every
        device holds a stage of every replica: each device holds one of replica 0, and replica
        1 mirrors it), so no forward before it ran inside a shorter overlapped pair.
        """
        inst = self.inst
        head: dict[Op, float] = {}
        for op in self.topological(range(min(inst.replicas, inst.microbatches)), implicit=False):
            if op.kind == Kind.F:
                head[op] = max((head[q] + self.duration(q) + c for q, c in self.preds(op)),
                               default=0.0)
        return [min(head[Op(Kind.F, s, inst.microbatches_of(s)[0], 0)] for s in inst.stages_of(d))
                for d in range(inst.devices)]

    def device_min_work(self, device: int) -> float:
        """A lower bound on the time a device computes (its ops' ``min_duration``)."""
        if not self.overlap and not self.has_modes:
            return self.inst.device_work(device)
        return sum(self.min_duration(op) for op in self.device_ops(device))

    def pair_options(self, device: int) -> Iterator[tuple[int, int, float]]:
        """(forward stage, backward stage, factor) of every overlapped pair the instance allows
        on ``device`` and its memory limit can hold (``_pair_fits``)."""
        stages = self.inst.stages_of(device)
        for a in stages:
            for b in stages:
                x = self.inst.overlap_factor(a, b)
                if x is not None and _pair_fits(self.inst, a, b):
                    yield a, b, x

    def job_duration(self, entry: Op | Pair) -> float:
        """An op's duration, or x (F + backward) for an overlapped pair (``pair_factor``)."""
        if isinstance(entry, Pair):
            x = self.pair_factor(entry)
            if x is None:
                raise ValueError(f"{entry} is not an overlapped pair the instance allows")
            return x * (self.duration(entry.first) + self.duration(entry.second))
        return self.duration(entry)

    def pair_factor(self, pair: Pair) -> float | None:
        """The overlap factor of (forward, backward), None if the instance forbids the pair:
        one forward and one I or B, different microbatches, different stages of one device."""
        fwd, bwd = pair
        if fwd.kind != Kind.F or bwd.kind not in (Kind.I, Kind.B) or fwd.mb == bwd.mb:
            return None
        return self.inst.overlap_factor(fwd.stage, bwd.stage)

    def hop(self, a: int, b: int) -> float:
        return self.inst.hop(a, b)

    def preds(self, op: Op) -> list[tuple[Op, float]]:
        """Direct predecessors of ``op`` with the delay each hand-off adds."""
        kind, s, j, g = op
        if kind == F:
            out = [] if s == self.first[s] else [(Op(F, s - 1, j, g), self._down[s])]
            if g > 0:
                out.append((Op(F, s, j, g - 1), 0.0))
            return out
        if kind == I or kind == B:
            if s == self.last[s]:
                out = [(Op(F, s, j, g), 0.0)]
            else:
                out = [(self.backward(s + 1, j, g), self._up[s])]
            if g + 1 < self.segments:
                out.append((self.backward(s, j, g + 1), 0.0))
            if self.has_modes:
                extra = self.mode_ops(s, j, g)
                if extra:
                    out.append((extra[-1], 0.0))  # R, RS or L: right before the backward
            return out
        if kind == W:
            return [(Op(I, s, j, g), 0.0)]
        if kind == R or kind == RS or kind == O:
            return [(Op(F, s, j, g), 0.0)]
        if kind == L:
            return [(Op(O, s, j, g), 0.0)]
        if kind == SYNC:
            S = self.inst.model_stages
            return [(self.last_op(t, mb, seg), 0.0) for t in (s, s + S)
                    for mb in self.inst.microbatches_of(t) for seg in range(self.segments)]
        if kind in _STEP_KINDS:
            return self._step_preds(op)
        raise ValueError(f"unknown op kind {kind!r} in {op}")

    def _step_preds(self, op: Op) -> list[tuple[Op, float]]:
        kind, s = op[0], op[1]
        S = self.inst.model_stages
        if kind == AR:
            if self.has_sync:
                return [(Op(SYNC, s, -1), 0.0)]
            return [(self.last_op(s, mb, seg), 0.0) for mb in self.inst.microbatches_of(s)
                    for seg in range(self.segments)]
        if kind == CHECK:
            return [(Op(AR, t, -1), 0.0) for t in range(S)]
        if kind == NORM:
            out = [(Op(AR, s % S, -1), 0.0)]
            if s != self.first[s]:
                out.append((Op(NORM, s - 1, -1), self._down[s]))
            return out
        if self.step_mode == "sync":  # OPT
            return [(GLOBAL_CHECK, 0.0)]
        return [(Op(AR, s % S, -1), 0.0)]

    def _step_succs(self, op: Op) -> list[tuple[Op, float]]:
        kind, s = op[0], op[1]
        S, n = self.inst.model_stages, self.inst.stages
        if kind == AR:
            copies = range(s, n, S)
            if self.step_mode == "sync":
                return [(GLOBAL_CHECK, 0.0)]
            return [(Op(NORM, t, -1), 0.0) for t in copies] + [(Op(OPT, t, -1), 0.0)
                                                                 for t in copies]
        if kind == CHECK:
            return [(Op(OPT, t, -1), 0.0) for t in range(n)]
        if kind == NORM and s != self.last[s]:
            return [(Op(NORM, s + 1, -1), self._down[s + 1])]
        return []

    def _reduce_op(self, stage: int) -> Op:
        """What a unit's last op of ``stage`` feeds at the step's end: SYNC, else AR."""
        return self.sync_op(stage) if self.has_sync else Op(AR, stage, -1)

    def succs(self, op: Op) -> list[tuple[Op, float]]:
        """Direct successors of ``op`` with their hand-off delays (the mirror of ``preds``)."""
        kind, s, j, g = op
        if kind == F:
            if s == self.last[s]:
                out = [(self.backward(s, j, g), 0.0)]
            else:
                out = [(Op(F, s + 1, j, g), self._down[s + 1])]
            if g + 1 < self.segments:
                out.append((Op(F, s, j, g + 1), 0.0))
            if self.has_modes:
                extra = self.mode_ops(s, j, g)
                if extra:
                    out.append((extra[0], 0.0))
            return out
        if kind == R or kind == RS or kind == L:
            return [(self.backward(s, j, g), 0.0)]
        if kind == O:
            return [(Op(L, s, j, g), 0.0)]
        if kind == I or kind == B:
            out = []
            if s != self.first[s]:
                out.append((self.backward(s - 1, j, g), self._up[s - 1]))
            if g > 0:
                out.append((self.backward(s, j, g - 1), 0.0))
            if kind == I:
                out.append((Op(W, s, j, g), 0.0))
            elif self.has_implicit:
                out.append((self._reduce_op(s), 0.0))
            return out
        if kind == W:
            return [(self._reduce_op(s), 0.0)] if self.has_implicit else []
        if kind == SYNC:
            return [(Op(AR, s, -1), 0.0)] if self.has_step else []
        if kind in _STEP_KINDS:
            return self._step_succs(op)
        return []

    def implicit_successors(self, op: Op) -> list[Op]:
        """The implicit ops that wait for ``op`` (cheap: the simulator asks after every op)."""
        kind = op[0]
        if not self.has_implicit or kind == F or kind == I:
            return []
        if kind == W or kind == B:
            return [self._reduce_op(op.stage)]
        return [q for q, _ in self.succs(op) if q[0] in _NO_DEVICE]

    def sync_op(self, stage: int) -> Op:
        return Op(Kind.SYNC, stage % self.inst.model_stages, -1)

    def handoffs(self, op: Op) -> list[Handoff]:
        """The outputs of ``op`` that travel to another device (P2P messages)."""
        d = self.device(op)
        return [Handoff(op, nxt, delay) for nxt, delay in self.succs(op)
                if self.device(nxt) not in (None, d)]

    def receives(self, op: Op) -> list[Handoff]:
        """The inputs of ``op`` that come from another device."""
        d = self.device(op)
        if d is None:
            return []
        return [Handoff(prev, op, delay) for prev, delay in self.preds(op)
                if self.device(prev) not in (None, d)]

    def same_class_prev(self, op: Op) -> Op | None:
        """The op of the previous interchangeable microbatch (same kind, stage and segment):
        microbatches of one replica have identical ops, so some optimal schedule runs them in
        order (``zbsolve.solver.bounds``).

        With memory modes, two microbatches are interchangeable only when their units run the
        same modes on every stage (the previous such one is returned). In the open view (modes
        still to be chosen) only the chain's first forward keeps an order: whole microbatches,
        modes and all, can be relabelled by when their first forward starts (docs/solver.md).

        A W that a pair may absorb keeps none: a pair's fused backward ties a unit's W to its
        I, so the Ws follow their units' Is instead of their own order (the relabelling keeps
        each W with its I). Sorted on their own, two replicas, p = 2, m = 4 under a limit lost
        0.5 of the optimum (18.5 against 18, ``tests/test_bounds.py``)."""
        prev = op.mb - self.inst.replicas
        if op.mb < 0 or prev < 0 or (op[0] == W and op.stage in self.absorbable):
            return None
        if self.open:
            first = op[0] == F and op.stage == self.first[op.stage] and op.seg == 0
            return op._replace(mb=prev) if first else None
        if self.has_modes and self.uniform_mode is None:
            prev = self._mode_class_prev(op.stage, op.mb)
            return None if prev is None else op._replace(mb=prev)
        return op._replace(mb=prev)

    def _mode_class_prev(self, stage: int, mb: int) -> int | None:
        """The previous microbatch of the replica whose units run the same modes as ``mb``'s."""
        if self._class_prev is None:
            S, R = self.inst.model_stages, self.inst.replicas
            table: dict[tuple[int, int], int | None] = {}
            for r in range(R):
                last: dict[tuple, int] = {}
                for j in range(r, self.inst.microbatches, R):
                    vector = tuple(self.mode(s, j, g) for s in range(r * S, r * S + S)
                                   for g in range(self.segments))
                    table[(r, j)] = last.get(vector)
                    last[vector] = j
            self._class_prev = table
        return self._class_prev[(self.inst.replica_of(stage), mb)]

    # ------------------------------------------------------------------ memory
    def lifetimes(self, stage: int, mb: int, seg: int = 0) -> list[Lifetime]:
        """The memory one unit holds on its device (zero amounts left out)."""
        inst = self.inst
        d = inst.placement[stage]
        act, kept = inst.segment_memory(stage, seg)
        f = Op(F, stage, mb, seg)
        if self.has_modes and self.mode(stage, mb, seg) != KEEP:
            return self._mode_lifetimes(stage, mb, seg, act, kept)
        if self.is_fused(stage, mb, seg):
            pieces = [(act, Op(B, stage, mb, seg))]
        else:
            pieces = [(act - kept, Op(I, stage, mb, seg)), (kept, Op(W, stage, mb, seg))]
        return [Lifetime(d, amount, f, START, freer, END) for amount, freer in pieces
                if amount > 0]

    def _mode_lifetimes(self, stage: int, mb: int, seg: int, act: float, weight: float
                        ) -> list[Lifetime]:
        """A recomputed or offloaded unit's memory (module docstring): a part ``held`` lives
        from F's start to the backward, the rest from F's start to ``frees``'s end (F for a
        recompute, O for an offload) and again from ``back``'s start (R / RS, or L); of what
        lives at the backward's end, ``weight`` stays until W (taken from the part re-allocated
        first)."""
        d = self.inst.placement[stage]
        mode = self.mode(stage, mb, seg)
        held = self.inst.kept(stage, mode)
        ops = self.mode_ops(stage, mb, seg)
        f = Op(F, stage, mb, seg)
        frees = f if mode != Mode.OFFLOAD else ops[0]
        back = ops[-1]
        bw, last = self.backward(stage, mb, seg), self.last_op(stage, mb, seg)
        rest = act - held
        w_back = min(weight, rest) if bw != last else 0.0  # weight's share in the re-allocated
        w_held = weight - w_back if bw != last else 0.0
        pieces = [(rest, f, START, frees), (held - w_held, f, START, bw), (w_held, f, START, last),
                  (rest - w_back, back, START, bw), (w_back, back, START, last)]
        return [Lifetime(d, amount, born, at, dies, END) for amount, born, at, dies in pieces
                if amount > 0]

    def device_lifetimes(self, device: int) -> Iterator[Lifetime]:
        for s in self.inst.stages_of(device):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
                    yield from self.lifetimes(s, j, g)

    def unit_memory(self, stage: int, seg: int = 0) -> float:
        """What one unit of ``stage`` allocates in all (its segment's activation)."""
        return self.inst.segment_memory(stage, seg)[0]


def modes_of_ops(ops: Iterable[Op]) -> dict[Unit, str]:
    """unit -> mode for the units whose ops include a mode's op (R, RS, O, L); ValueError
    naming the unit when one unit carries the ops of two modes."""
    out: dict[Unit, str] = {}
    for op in ops:
        mode = KIND_MODE.get(op[0])
        if mode is None:
            continue
        seen = out.setdefault(op.unit, mode)
        if seen != mode:
            s, j, g = op.unit
            raise ValueError(f"unit (stage {s}, microbatch {j}{f', segment {g}' if g else ''}) "
                             f"runs both {seen} and {mode} ({op}); a unit has one memory mode")
    return out
