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
A hand-off between stages of different devices waits ``comm``; everything else waits 0.
Segments (g) are 0 .. segments-1; with one segment the segment edges vanish.

Memory
------
Each unit's activation is a set of lifetimes on its device: split, activation - weight lives
from F's start to I's end and weight from F's start to W's end; fused, the activation lives
from F's start to B's end. With segments, a unit's activation is its segment's share
(``Instance.segment_memory``), and the keys and values later segments read are part of it: they
live until the unit's I (or B), which the segment edges above put after every later segment's.
A device also holds ``params`` of its stages all step long. The
simulator turns lifetimes into events; the CP-SAT model turns them into cumulative intervals.

Jobs
----
A device runs jobs in order: an op, or an overlapped pair (``ops.Pair``: a forward and a
backward of different microbatches and stages of the device, allowed by ``overlap``, lasting
x times their sum). A SYNC job runs on no device: it starts as soon as its inputs are done.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from zbsolve.instance import Instance
from zbsolve.ops import Kind, Op, Pair

START, END = 0, 1
"""Which boundary of an op a memory event happens at."""

# The kinds as plain strings: the simulator and the schedulers call ``preds`` / ``succs`` for
# every op, and an enum member's attribute lookup costs four times a string comparison there.
F, I, W, B, SYNC = (k.value for k in (Kind.F, Kind.I, Kind.W, Kind.B, Kind.SYNC))  # noqa: E741


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


class TaskGraph:
    """Ops, dependencies, durations, devices and memory of one instance in one form."""

    def __init__(self, inst: Instance, fused: Iterable[tuple[int, int, int]] | bool = ()):
        self.inst = inst
        self.all_fused = fused is True
        self.fused = frozenset() if isinstance(fused, bool) else frozenset(fused)
        S = inst.model_stages
        self.first = tuple(s - s % S for s in range(inst.stages))  # first stage of s's chain
        self.last = tuple(f + S - 1 for f in self.first)
        self.segments = getattr(inst, "segments", 1)
        self.has_sync = inst.replicas > 1
        self.split = not self.all_fused and not self.fused  # every unit split: the fast path
        n = inst.stages
        self._down = tuple(inst.hop(s - 1, s) if s > 0 else 0.0 for s in range(n))  # s-1 -> s
        self._up = tuple(inst.hop(s + 1, s) if s + 1 < n else 0.0 for s in range(n))  # s+1 -> s
        self.overlap = inst.overlap is not None
        if self.overlap:  # the smallest pair factor each stage can run under, as F / as backward
            fx = [min((x for t in inst.stages_of(inst.placement[s])
                       if (x := inst.overlap_factor(s, t)) is not None), default=1.0)
                  for s in range(n)]
            bx = [min((x for t in inst.stages_of(inst.placement[s])
                       if (x := inst.overlap_factor(t, s)) is not None), default=1.0)
                  for s in range(n)]
            self._min_x = (tuple(min(1.0, x) for x in fx), tuple(min(1.0, x) for x in bx))
        else:
            self.min_duration = self.duration  # no pairs: a job lasts its duration

    @staticmethod
    def of(inst: Instance, ops: Iterable[Op]) -> TaskGraph:
        """The form a schedule's ops use: a unit is fused where a B op appears."""
        return TaskGraph(inst, {op.unit for op in ops if op.kind == Kind.B})

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
        f = Op(F, stage, mb, seg)
        if self.is_fused(stage, mb, seg):
            return (f, Op(B, stage, mb, seg))
        return (f, Op(I, stage, mb, seg), Op(W, stage, mb, seg))

    # ------------------------------------------------------------------ the ops
    def units(self) -> Iterator[tuple[int, int, int]]:
        """Every (stage, microbatch, segment), stage-major."""
        for s in range(self.inst.stages):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
                    yield (s, j, g)

    def ops(self) -> Iterator[Op]:
        """Every op of this form: the device ops, then the implicit ones (SYNC)."""
        for unit in self.units():
            yield from self.unit_ops(*unit)
        yield from self.implicit_ops()

    def implicit_ops(self) -> Iterator[Op]:
        """Ops no device runs (the simulator starts them when their inputs are done)."""
        if self.has_sync:
            for s in range(self.inst.model_stages):
                yield Op(Kind.SYNC, s, -1)

    def device_ops(self, device: int) -> Iterator[Op]:
        for s in self.inst.stages_of(device):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
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
        return order

    def count(self) -> int:
        """How many ops ``ops()`` yields (without walking them)."""
        inst = self.inst
        units = inst.stages * (inst.microbatches // inst.replicas) * self.segments
        fused = units if self.all_fused else len(self.fused)
        return 3 * units - fused + (inst.model_stages if self.has_sync else 0)

    def exists(self, op: Op) -> bool:
        """Whether ``op`` is an op of this graph (kind, stage, microbatch, segment and form)."""
        inst = self.inst
        if op.kind == Kind.SYNC:
            return self.has_sync and 0 <= op.stage < inst.model_stages and op.mb == -1 \
                and op.seg == 0
        if op.kind not in (Kind.F, Kind.I, Kind.W, Kind.B):
            return False
        if not (0 <= op.stage < inst.stages and 0 <= op.seg < self.segments):
            return False
        if op.mb not in inst.microbatches_of(op.stage):
            return False
        if op.kind == Kind.F:
            return True
        return (op.kind == Kind.B) == self.is_fused(*op.unit)

    # ------------------------------------------------------------------ per op
    def device(self, op: Op) -> int | None:
        """The device that runs ``op`` (None for implicit ops)."""
        return None if op[0] == SYNC else self.inst.placement[op[1]]

    def duration(self, op: Op) -> float:
        """The op's time: its segment's share of its stage's F, I, W or B (``Instance``)."""
        return self.inst.duration(op[0], op[1], op[3])

    def min_duration(self, op: Op) -> float:
        """A lower bound on the time from ``op``'s start to its end in any job: its duration,
        or x times it where it may run in an overlapped pair of factor x (the pair lasts
        x (F + B) >= x F, and its backward ends with it). Bounds use this, so they stay valid
        when the solver may pair ops."""
        if op[0] == SYNC:
            return self.duration(op)
        fx, bx = self._min_x
        return self.duration(op) * (fx if op[0] == F else bx)[op[1]]

    def device_min_work(self, device: int) -> float:
        """A lower bound on the time a device computes (its ops' ``min_duration``)."""
        if not self.overlap:
            return self.inst.device_work(device)
        return sum(self.min_duration(op) for op in self.device_ops(device))

    def pair_options(self, device: int) -> Iterator[tuple[int, int, float]]:
        """(forward stage, backward stage, factor) of every overlapped pair the instance allows
        on ``device``."""
        stages = self.inst.stages_of(device)
        for a in stages:
            for b in stages:
                x = self.inst.overlap_factor(a, b)
                if x is not None:
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
            return out
        if kind == W:
            return [(Op(I, s, j, g), 0.0)]
        if kind == SYNC:
            S = self.inst.model_stages
            return [(self.last_op(t, mb, seg), 0.0) for t in (s, s + S)
                    for mb in self.inst.microbatches_of(t) for seg in range(self.segments)]
        raise ValueError(f"unknown op kind {kind!r} in {op}")

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
            return out
        if kind == I or kind == B:
            out = []
            if s != self.first[s]:
                out.append((self.backward(s - 1, j, g), self._up[s - 1]))
            if g > 0:
                out.append((self.backward(s, j, g - 1), 0.0))
            if kind == I:
                out.append((Op(W, s, j, g), 0.0))
            elif self.has_sync:
                out.append((self.sync_op(s), 0.0))
            return out
        if kind == W:
            return [(self.sync_op(s), 0.0)] if self.has_sync else []
        return []

    def implicit_successors(self, op: Op) -> list[Op]:
        """The implicit ops that wait for ``op`` (cheap: the simulator asks after every op)."""
        if self.has_sync and (op[0] == W or op[0] == B):
            return [self.sync_op(op.stage)]
        return []

    def sync_op(self, stage: int) -> Op:
        return Op(Kind.SYNC, stage % self.inst.model_stages, -1)

    def handoffs(self, op: Op) -> list[Handoff]:
        """The outputs of ``op`` that travel to another device (P2P messages)."""
        d = self.device(op)
        return [Handoff(op, nxt, delay) for nxt, delay in self.succs(op)
                if nxt.kind != Kind.SYNC and self.device(nxt) != d]

    def receives(self, op: Op) -> list[Handoff]:
        """The inputs of ``op`` that come from another device."""
        d = self.device(op)
        if d is None:
            return []
        return [Handoff(prev, op, delay) for prev, delay in self.preds(op)
                if self.device(prev) != d]

    def same_class_prev(self, op: Op) -> Op | None:
        """The op of the previous interchangeable microbatch (same kind, stage and segment):
        microbatches of one replica have identical ops, so some optimal schedule runs them in
        order (``zbsolve.solver.bounds``)."""
        prev = op.mb - self.inst.replicas
        return op._replace(mb=prev) if op.mb >= 0 and prev >= 0 else None

    # ------------------------------------------------------------------ memory
    def lifetimes(self, stage: int, mb: int, seg: int = 0) -> list[Lifetime]:
        """The memory one unit holds on its device (zero amounts left out)."""
        inst = self.inst
        d = inst.placement[stage]
        act, kept = inst.segment_memory(stage, seg)
        f = Op(F, stage, mb, seg)
        if self.is_fused(stage, mb, seg):
            pieces = [(act, Op(B, stage, mb, seg))]
        else:
            pieces = [(act - kept, Op(I, stage, mb, seg)), (kept, Op(W, stage, mb, seg))]
        return [Lifetime(d, amount, f, START, freer, END) for amount, freer in pieces
                if amount > 0]

    def device_lifetimes(self, device: int) -> Iterator[Lifetime]:
        for s in self.inst.stages_of(device):
            for j in self.inst.microbatches_of(s):
                for g in range(self.segments):
                    yield from self.lifetimes(s, j, g)

    def unit_memory(self, stage: int, seg: int = 0) -> float:
        """What one unit of ``stage`` allocates in all (its segment's activation)."""
        return self.inst.segment_memory(stage, seg)[0]
