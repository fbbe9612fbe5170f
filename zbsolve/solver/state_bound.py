"""A bound that branches on the memory state at one forward (docs/solver.md, "Branching on a
forward's memory state").

Why. On V placements the analytic bound misses memory held across kinds and stages at once:
at the start of the V tip's last forward its device must have freed enough, and whether it
freed it by running its W's early or by taking its backwards late is a choice no longest
path sees (ZB-V's 6.2B times at p = 2, m = 4: the analytic bound 310.98, the optimum 318.93;
without the memory cumulative the exact model's optimum is 310.98 too).

The argument. Fix X = F(t, n) on device e and assume microbatch order per (kind, stage) (some
optimal schedule has it: ``bounds``' module docstring). At X's start, for each *class* c = (I
or W, stage s <= t of e), the ops of microbatches < a_c have ended and those of a_c .. n-1
have not; a_W <= a_I per stage and a_I(lower stage) <= a_I(higher stage). The device then
holds microbatch n's activations of its stages <= t (their forwards precede X) plus, per
earlier microbatch and stage <= t, the activation while its I is pending, else the W part
while its W is (its higher stages and later microbatches may hold more: leaving them out only
admits more states). That must fit the limit. Under such a threshold vector:
- the last ended op of each class ends before X starts (edge op(c, a_c - 1) -> X);
- the first op not ended starts after X ends (edge X -> op(c, a_c)): it is on X's device and
  had not ended when X started, so it had not started either;
- X starts after its ancestors on e have run: their one-machine end (in order of heads), and,
  since before e's earliest I only forwards run and at most floor(room / least activation) of
  them fit, after h_I + work - min(forwards' longest fit, h_I - h_F);
and the head-body-tail bound of every device on the graph with these edges bounds the
objective. Every schedule has one of the vectors, so the least bound over them is a bound.

The vectors are searched as boxes (an interval per class), best first: a box's edges are
those of its interval ends (op(c, lo - 1) -> X, X -> op(c, hi)), which every vector in it
implies, so a box's bound is at most each of its vectors' and a box that closes a cycle or
cannot fit in memory at its least-memory corner holds no schedule. The least bound over the
open boxes is valid at every step, so the search stops at any budget with a valid bound
(best first: it stops at a single vector, the exact minimum, or when the bound reaches a
target such as the incumbent).

Each box is evaluated on longest paths computed once: every path of the augmented graph
passes X at most once, so heads, tails and cycles follow from the base graph's paths from
and to X and the class ops (numpy vectors), and only the per-device one-machine bounds are
walked per box.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, v_players
from zbsolve.numeric import REL_TOL
from zbsolve.ops import Op
from zbsolve.solver import bounds

NEG = -math.inf
# the paths from and to the class ops are two float matrices of ops x columns: at most this
# many cells each (200 MB); ZB-V at p = 32, m = 256 needs 49,152 x 387
MAX_CELLS = 25_000_000

REPORT_EVERY = 1.0  # seconds between progress reports

Class = tuple[str, int]  # ("I" or "W", stage)


def applies(inst: Instance) -> str | None:
    """None where the argument holds (a plain instance: one op per kind, stage and
    microbatch, each unit holding its whole activation from F to I, and a memory limit),
    else why not."""
    if not inst.plain:
        return "not a plain instance (replicas, segments, pairs, memory modes or step jobs)"
    if any(lim is None for lim in inst.limit):
        return "a device without a memory limit"
    return None


def v_tip(inst: Instance) -> tuple[int, int] | None:
    """(device, stage) of the V's tip: stage p, on the device that holds stages p - 1 and p
    (device p - 1 in the V's own numbering; an explicit placement may number the devices
    otherwise, and the bound reads only which stages each device holds). None if not a V."""
    played = v_players(inst)
    return None if played is None else (played[-1], inst.devices)


@dataclass(frozen=True)
class StateBound:
    """The bound (min over the open boxes), whether the search finished (exact minimum,
    every vector), how many boxes it evaluated and how long it took."""

    value: float
    exact: bool
    boxes: int
    seconds: float


class _Space:
    """Threshold vectors at X = F(t, n) on device e: classes, memory, box tightening."""

    def __init__(self, inst: Instance, e: int, t: int, n: int):
        self.n = n
        self.stages = [s for s in inst.stages_of(e) if s <= t]
        self.classes: list[Class] = ([("I", s) for s in self.stages]
                                     + [("W", s) for s in self.stages])
        self.slot = {c: i for i, c in enumerate(self.classes)}
        self.act, self.wgt = inst.activation, inst.weight  # plain: one segment per unit
        # the most the simulator lets e hold (``numeric.exceeds``), less its params
        self.room = inst.limit[e] / (1 - REL_TOL) - inst.resident(e)

    def held(self, a: list[int]) -> float:
        """What e holds at X's start under vector ``a`` (see the module docstring)."""
        out = 0.0
        for s in self.stages:
            ai, aw = a[self.slot[("I", s)]], a[self.slot[("W", s)]]
            out += self.act[s] * (self.n - ai + 1) + self.wgt[s] * (ai - aw)
        return out

    def _corner(self, hi: list[int]) -> list[int]:
        """The least-memory vector of a box: every class at its top, then consistent (a lower
        stage's I no further than a higher one's, a W no further than its I)."""
        a = list(hi)
        st = self.stages
        for lo_s, hi_s in zip(reversed(st[:-1]), reversed(st[1:])):
            a[self.slot[("I", lo_s)]] = min(a[self.slot[("I", lo_s)]], a[self.slot[("I", hi_s)]])
        for s in st:
            a[self.slot[("W", s)]] = min(a[self.slot[("W", s)]], a[self.slot[("I", s)]])
        return a

    def _fits(self, lo: list[int], hi: list[int]) -> bool:
        a = self._corner(hi)
        return all(x >= y for x, y in zip(a, lo)) and self.held(a) <= self.room

    def tighten(self, lo: list[int], hi: list[int]) -> bool:
        """Shrink the box to the vectors it may hold (in place); False if it holds none."""
        slot, st = self.slot, self.stages
        for s in st:
            w, i = slot[("W", s)], slot[("I", s)]
            hi[w] = min(hi[w], hi[i])
            lo[i] = max(lo[i], lo[w])
        for a, b in zip(reversed(st[:-1]), reversed(st[1:])):  # top stage down
            hi[slot[("I", a)]] = min(hi[slot[("I", a)]], hi[slot[("I", b)]])
        for a, b in zip(st, st[1:]):
            lo[slot[("I", b)]] = max(lo[slot[("I", b)]], lo[slot[("I", a)]])
        if any(x > y for x, y in zip(lo, hi)) or not self._fits(lo, hi):
            return False
        for k in range(len(lo)):  # the least value of each class that still fits
            top = hi[k]
            while lo[k] < top:
                mid = (lo[k] + top) // 2
                probe = list(hi)
                probe[k] = mid
                if self._fits(lo[:k] + [mid] + lo[k + 1:], probe):
                    top = mid
                else:
                    lo[k] = mid + 1
        return True


class _Paths:
    """Longest paths of the base graph (the DAG, microbatch chains and memory edges, start to
    start), computed once: heads, per-device tails, and paths from and to each of ``ends``
    (the class ops a box can name, then X)."""

    def __init__(self, inst: Instance, graph: TaskGraph, ends: list[Op], objective: str):
        e = bounds.edges(graph, graph.topological(implicit=False), True,
                         bounds.memory_precedences(inst))
        topo, index = e.ops, e.index
        n_ops = len(topo)
        self.dur = dur = np.array([graph.min_duration(op) for op in topo])
        preds, succ = _arrays(e.preds), _arrays(e.succs)
        self.ends = np.array([index[op] for op in ends], dtype=int)
        self.x = int(self.ends[-1])
        self.head = _walk(preds, np.zeros((n_ops, 1)), range(n_ops))[:, 0]
        seeds = np.full((n_ops, len(ends)), NEG)
        seeds[self.ends, np.arange(len(ends))] = 0.0
        self.from_ = _walk(preds, seeds.copy(), range(n_ops))
        self.to = _walk(succ, seeds, range(n_ops - 1, -1, -1))
        self.device_of = np.array([graph.device(op) for op in topo])
        if objective == "span":  # to the end of an op of each device (own-device tails)
            self.h0 = np.array(graph.device_heads())
            seeds = np.full((n_ops, inst.devices), NEG)
            seeds[np.arange(n_ops), self.device_of] = dur
            self.tails = _walk(succ, seeds, range(n_ops - 1, -1, -1))
        else:  # to the end of any op (the makespan's tail), the same column for every device
            self.h0 = np.zeros(inst.devices)
            one = _walk(succ, dur[:, None].copy(), range(n_ops - 1, -1, -1))
            self.tails = np.repeat(one, inst.devices, axis=1)
        # rows grouped by device, so that each device's rows are a slice (a view, no copy)
        order = np.argsort(self.device_of, kind="stable")
        where = np.empty_like(order)
        where[order] = np.arange(n_ops)
        self.ends, self.x = where[self.ends], int(where[self.x])
        for name in ("head", "from_", "to", "tails", "dur", "device_of"):
            setattr(self, name, getattr(self, name)[order])
        self.kind = np.array([op.kind for op in topo])[order]
        bounds_ = np.searchsorted(self.device_of, np.arange(inst.devices + 1))
        self.rows = [slice(int(a), int(b)) for a, b in zip(bounds_, bounds_[1:])]


def _arrays(lists: list[list[tuple[int, float]]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each op's (index, weight) list as two arrays, for ``_walk``."""
    return [(np.array([j for j, _ in ps], dtype=int), np.array([w for _, w in ps], dtype=float))
            for ps in lists]


def _walk(edges: list[tuple[np.ndarray, np.ndarray]], out: np.ndarray, order) -> np.ndarray:
    """Longest paths in place: ``out[i] = max(out[i], out[j] + w)`` over ``edges[i]``, the ops
    in ``order`` (topological for predecessor lists, reversed for successor lists)."""
    for i in order:
        js, ws = edges[i]
        if len(js):
            out[i] = np.maximum(out[i], (out[js] + ws[:, None]).max(axis=0))
    return out


class _Evaluator:
    """The bound under one box: X's head, then the head-body-tail bound of some devices."""

    def __init__(self, inst: Instance, graph: TaskGraph, e: int, space: _Space,
                 ends: list[Op], objective: str):
        self.space = space
        # column of op(classes[k], j) in the paths; X is the last
        self.col = {(space.slot[(op.kind, op.stage)], op.mb): i for i, op in enumerate(ends[:-1])}
        self.p = p = _Paths(inst, graph, ends, objective)
        self.mine = p.rows[e]
        self.ids = np.arange(self.mine.start, self.mine.stop)
        # the most forwards that fit before any I ends: all of the smallest activation
        self.fits = int(space.room // min(inst.activation[s] for s in inst.stages_of(e)))
        self.h_i = float(p.head[self.mine][p.kind[self.mine] == "I"].min())  # e's first I

    def value(self, lo: list[int], hi: list[int], devices: Iterable[int]
              ) -> tuple[float, int] | None:
        """The bound under the box on ``devices`` and the device that gives it; None if the
        box's edges close a cycle."""
        p, n, X = self.p, self.space.n, len(self.p.ends) - 1
        into = [self.col[k, a - 1] for k, a in enumerate(lo) if a > 0]
        out = [self.col[k, b] for k, b in enumerate(hi) if b < n]
        into_ops = p.ends[into]
        # a cycle: X, or an op X must precede, reaches X or an op that must precede X (the
        # memory edges alone can make an op X must precede an ancestor of X)
        reach = p.from_[[*into_ops, p.x]][:, [X, *out]] > NEG
        reach[-1, 0] = False  # X itself
        if reach.any():
            return None
        dur_x = p.dur[p.x]
        # X's head: its own, its new predecessors', its ancestors on e (one machine, and the
        # forwards-only warm-up before e's first I)
        h_x = max(p.head[p.x], (p.head[into_ops] + p.dur[into_ops]).max(initial=NEG))
        anc = (p.to[self.mine][:, [X, *into]] > NEG).any(axis=1)
        anc_ops = self.ids[anc & (self.ids != p.x)]
        if len(anc_ops):
            lengths = p.dur[anc_ops]
            # one machine, release dates, no tails: in release order, the largest head plus
            # the work released at or after it
            order = np.argsort(p.head[anc_ops], kind="stable")
            h_x = max(h_x, float((p.head[anc_ops][order]
                                  + np.cumsum(lengths[order][::-1])[::-1]).max()))
            is_f = p.kind[anc_ops] == "F"
            work = float(lengths.sum())
            h_f = float(p.head[anc_ops][is_f].min()) if is_f.any() else self.h_i
            fit = float(np.sort(lengths[is_f])[::-1][:self.fits].sum())
            pre = min(fit, max(self.h_i - h_f, 0.0))
            if work > pre:
                h_x = max(h_x, self.h_i + work - pre)
        # heads through X (X's own descendants, and those of the ops it must precede) and
        # tails through X (an op's path to X or to an op that must precede it, then X's tail
        # or, past the ops X must precede, theirs), on each device's rows alone (a view)
        tail_x = p.tails[p.x]
        if out:
            tail_x = np.maximum(tail_x, dur_x + p.tails[p.ends[out]].max(axis=0))
        best, arg = NEG, -1
        for d in devices:
            rows = p.rows[d]
            dur = p.dur[rows]
            via = p.from_[rows, X]
            if out:
                via = np.maximum(via, dur_x + p.from_[rows][:, out].max(axis=1))
            to_x = p.to[rows, X]
            if into:
                to_x = np.maximum(to_x, (p.to[rows][:, into] + p.dur[into_ops]).max(axis=1))
            head = np.maximum(p.head[rows], h_x + via)
            tails = np.maximum(np.maximum(p.tails[rows, d], to_x + tail_x[d]) - dur, 0.0)
            v = bounds._one_machine_bound(list(zip(head.tolist(), dur.tolist(),
                                                   tails.tolist()))) - p.h0[d]
            if v > best:
                best, arg = float(v), d
        return best, arg


def _ends(space: _Space, t: int, lo: list[int], hi: list[int]) -> list[Op]:
    """The class ops a box within (lo, hi) can name, op(c, lo - 1) .. op(c, hi) within
    0 .. n - 1, then X: the ops ``_Paths`` walks from and to."""
    return [Op(kind, s, j) for (kind, s), a, b in zip(space.classes, lo, hi)
            for j in range(max(a - 1, 0), min(b, space.n - 1) + 1)] + [Op("F", t, space.n)]


def state_bound(inst: Instance, objective: str = "span", at: tuple[int, int] | None = None,
                target: float = math.inf, boxes: int = 100_000,
                deadline: float | None = None, max_cells: int = MAX_CELLS,
                floor: float = NEG, patience: int | None = None,
                report: Callable[[float, int], None] | None = None) -> StateBound | None:
    """The bound at X = F(t, m - 1) on device e (``at`` = (e, t); default the V's tip), or
    None where it does not apply (``applies``, not a V without ``at``) or its paths would take
    more than ``max_cells`` cells.

    Stops at the exact minimum, when the bound reaches ``target``, after ``boxes`` boxes, or at
    ``deadline`` (``time.monotonic()``), or after ``patience`` boxes if it is still at most
    ``floor`` (a bound known otherwise); the value is valid whichever stops it. ``report``
    hears (bound, boxes) at most every REPORT_EVERY seconds while the bound rises.

    Boxes are evaluated lazily: a child on the device that gave its parent's bound (one
    device's head-body-tail bound is a bound too, so the heap stays valid), a single vector on
    every device once it reaches the top of the heap (it goes back if that raised its value).
    """
    if objective not in ("makespan", "span"):
        raise ValueError(f"objective: expected 'makespan' or 'span', got {objective!r}")
    at = at or v_tip(inst)
    if applies(inst) is not None or at is None:
        return None
    t0 = time.monotonic()
    e, t = at
    space = _Space(inst, e, t, inst.microbatches - 1)
    lo, hi = [0] * len(space.classes), [space.n] * len(space.classes)
    if not space.tighten(lo, hi):  # no vector fits: X cannot start (limit below the minimum)
        return StateBound(math.inf, True, 0, time.monotonic() - t0)
    ends = _ends(space, t, lo, hi)
    graph = TaskGraph(inst)
    if len(ends) * graph.count() > max_cells:
        return None
    ev = _Evaluator(inst, graph, e, space, ends, objective)
    everyone = range(inst.devices)
    count, tie = 0, itertools.count()
    # (value, tie, lo, hi, on every device, the device that gave the value)
    heap: list[tuple[float, int, list[int], list[int], bool, int]] = []

    def push(lo: list[int], hi: list[int], parent: float, device: int | None) -> None:
        nonlocal count
        got = ev.value(lo, hi, everyone if device is None else [device])
        count += 1
        if got is not None:  # a child's edges imply its parent's: never below it
            heapq.heappush(heap, (max(got[0], parent), next(tie), lo, hi, device is None,
                                  got[1]))

    push(lo, hi, NEG, None)
    said, said_at = NEG, time.monotonic()
    while heap:
        v, _, lo, hi, full, arg = heapq.heappop(heap)
        if report is not None and v > said and time.monotonic() - said_at >= REPORT_EVERY:
            report(v, count)
            said, said_at = v, time.monotonic()
        if not full and lo == hi:  # evaluated on one device only: on all of them now
            push(lo, hi, v, None)
            continue
        if (lo == hi or v >= target or count >= boxes
                or (patience is not None and count >= patience and v <= floor)
                or (deadline is not None and time.monotonic() >= deadline)):
            return StateBound(v, lo == hi, count, time.monotonic() - t0)
        k = max(range(len(lo)), key=lambda i: hi[i] - lo[i])
        mid = (lo[k] + hi[k]) // 2
        for a, b in ((lo[k], mid), (mid + 1, hi[k])):
            l2, h2 = list(lo), list(hi)
            l2[k], h2[k] = a, b
            if space.tighten(l2, h2):
                push(l2, h2, v, arg)
    return StateBound(math.inf, True, count, time.monotonic() - t0)  # no schedule at all
