"""ZB-V as the Zero Bubble authors build it: a phased, timed construction on the V.

The arXiv version of "Zero Bubble Pipeline Parallelism" reports ZB-V bubble rates that come
from the authors' V-schedule generator. This module rebuilds that generator's *idea* in our
own terms (ops, the instance's durations and comm, our memory model); it shares no code with
it. The construction appends ops to per-device orders one at a time and times each one as it
goes (start = max(device free, inputs arrived + comm)), which is exactly what the simulator
will compute later for the same orders.

Vocabulary (device d holds chunk 0 = stage d and chunk 1 = stage 2p-1-d):
- forward streams: chunk 0 flows down (device 0 -> p-1), chunk 1 flows back up;
- input-backward streams: "down" = I of chunk 1 (starts on device 0, where the last stage
  lives, flows to device p-1), "up" = I of chunk 0 (device p-1 -> 0);
- W's wait in a FIFO per device and fill waits.

Phases:
1. every device runs its first chunk-0 forward;
2. from the turn (device p-1) back to device 0: device d keeps adding chunk-0 forwards on
   devices 0..d while the extra one would still end before microbatch 0 comes back on
   chunk 1, and while memory leaves room for 2 + 2d more; then d runs chunk 1 of
   microbatch 0;
3. devices past the first catch up in forwards (alternating chunks, fed from the turn side)
   until each has at least as many forwards as its upstream neighbour and one more chunk-1
   forward;
4. 2m rounds; each round gives every device one input backward (the "up" stream when its
   input is already there or the "down" stream is exhausted, else "down"; "up" devices are
   visited from p-1 down, "down" devices from 0 up, so every input is placed before it is
   needed) and then at most one forward (chunk 1 when its input is there, else chunk 0 when
   its input is there). Before an op, pending W's run while one fits into the wait for the
   op's input; one more W may run when the wait is longer than the device's remaining
   bubble allowance (``FillRules.before_i``/``before_f`` choose whether that applies to the
   "down" backward and to forwards). A forward that would exceed the memory cap first
   flushes W's.
5. remaining W's.

The bubble allowance of a device is the largest idle time any device has had so far; a
second pass gives each device extra allowance equal to how much less idle it had than the
worst device in the previous pass (so lightly loaded devices take W's early and the worst
one is relieved), repeated while the worst idle improves. The four fill settings are all
tried; the caller keeps the one with the least longest span (the construction's times are
the simulator's, tests/test_baselines_v.py checks that).

One departure, which never triggers on equal stages: a phase-3 forward whose input is not
there yet or that would not fit is skipped (phase 4 places it) instead of failing, so
uneven stages break the construction less often.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Op

EPS = 1e-9
MAX_PASSES = 64  # allowance refinement passes; it stops long before in practice


class ConstructionError(RuntimeError):
    """The phased ZB-V construction does not apply to this instance (the message says where).

    Its counting rules assume equal stages (the authors' setting); uneven stage times can
    leave an op without its input where the rules place it, uneven memory can hit the cap
    with nothing to flush. The caller falls back to the generic V list scheduler then.
    """


@dataclass(frozen=True)
class FillRules:
    """Whether a W may be spent on a wait longer than the allowance before a "down" input
    backward (``before_i``) or before a forward (``before_f``); "up" backwards always may."""

    before_i: bool
    before_f: bool


ALL_RULES = tuple(FillRules(b, f) for b in (True, False) for f in (True, False))


@dataclass
class Construction:
    """One constructed schedule: per-device orders and the idle time each device had after
    its first op (the span metric's bubble, as the construction timed it)."""

    orders: list[list[Op]]
    idle: list[float]  # per device: idle time between its first start and its last end
    span: list[float]  # per device: first start to last end, as the construction timed it
    makespan: float
    rules: FillRules
    passes: int  # construction passes run (allowance refinement)

    @property
    def worst_idle(self) -> float:
        return max(self.idle)

    @property
    def max_span(self) -> float:
        """The ZB papers' step time for ZB-V; the simulator computes the same for ``orders``."""
        return max(self.span)


_KINDS = ("F", "I", "W")


class _Builder:
    """Per-device state of one construction pass; ``put`` appends and times one op.

    Times live in per-(kind, stage) arrays indexed by microbatch (-1 = not placed yet): the
    construction places ~6pm ops per pass and a few passes per instance, so dict lookups
    and Op objects in the inner loop would dominate at p = 32, m = 256.
    """

    def __init__(self, inst: Instance, cap_chunks: int, extra: list[float]):
        p, m = inst.devices, inst.microbatches
        S = inst.stages
        self.inst = inst
        self.p, self.m = p, m
        self.stages = [(d, 2 * p - 1 - d) for d in range(p)]
        self.cap = [cap_chunks * max(inst.activation[a], inst.activation[b])
                    for a, b in self.stages]
        self.extra = extra  # per device: extra bubble allowance from the previous pass
        self.free = [0.0] * p
        self.mem = [0.0] * p
        self.idle = [0.0] * p
        self.worst = 0.0  # running max of idle (idle only grows)
        self.started = [False] * p
        self.first = [0.0] * p  # start of each device's first op
        self.nf = [[0, 0] for _ in range(p)]  # forwards run per chunk
        self.ni = [[0, 0] for _ in range(p)]  # input backwards run: [down (chunk 1), up (chunk 0)]
        self.pending: list[deque[tuple[int, int]]] = [deque() for _ in range(p)]  # (stage, mb)
        self.orders: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]
        self.end = [[[-1.0] * m for _ in range(S)] for _ in _KINDS]  # end[kind][stage][mb]
        self.dur = [[inst.duration(k, s) for s in range(S)] for k in _KINDS]
        self.delta = [list(inst.activation),
                      [-(a - w) for a, w in zip(inst.activation, inst.weight)],
                      [-w for w in inst.weight]]
        # Input of (kind, stage, mb): the same microbatch at (kind', stage') plus a delay,
        # read once per (kind, stage) from the task graph, the one definition of dependencies.
        graph = TaskGraph(inst)
        self.pred: list[list[tuple[int, int, float] | None]] = []
        for kind in _KINDS:
            row = []
            for s in range(S):
                found = graph.preds(Op(kind, s, 0))
                if not found:
                    row.append(None)
                    continue
                (pk, ps, pm, _), delay = found[0]
                if len(found) != 1 or pm != 0:
                    raise ConstructionError(f"unexpected dependencies for {kind}{s}: {found}")
                row.append((_KINDS.index(pk), ps, delay))
            self.pred.append(row)

    # ------------------------------------------------------------------ ops by stream
    def arrival(self, k: int, s: int, j: int) -> float:
        """When the op's input is there (0 for none), or -1 when it is not placed yet."""
        pr = self.pred[k][s]
        if pr is None:
            return 0.0
        e = self.end[pr[0]][pr[1]][j]
        return -1.0 if e < 0 else e + pr[2]

    def placed(self, k: int, s: int, j: int) -> bool:
        return self.end[k][s][j] >= 0

    def allowance(self, d: int) -> float:
        return max(self.worst, self.extra[d])

    # ------------------------------------------------------------------ placing
    def put(self, d: int, k: int, s: int, j: int, ready: float | None = None) -> None:
        if j >= self.m:
            raise ConstructionError(f"device {d}: no microbatch left for {_KINDS[k]}{s}")
        if ready is None:
            ready = self.arrival(k, s, j)
        if ready < 0:
            raise ConstructionError(f"device {d}: {s}{_KINDS[k]}{j} placed before its input")
        delta = self.delta[k][s]
        if self.mem[d] + delta > self.cap[d] + EPS:
            raise ConstructionError(f"device {d}: {s}{_KINDS[k]}{j} would exceed the memory cap")
        free = self.free[d]
        start = ready if ready > free else free
        if self.started[d]:
            self.idle[d] += start - free
            if self.idle[d] > self.worst:
                self.worst = self.idle[d]
        else:
            self.first[d] = start
        self.started[d] = True
        end = start + self.dur[k][s]
        self.free[d] = end
        self.end[k][s][j] = end
        self.mem[d] += delta
        self.orders[d].append((k, s, j))
        if k == 0:
            self.nf[d][0 if s == self.stages[d][0] else 1] += 1
        elif k == 1:
            self.ni[d][0 if s == self.stages[d][1] else 1] += 1
            self.pending[d].append((s, j))

    def put_forward(self, d: int, chunk: int) -> None:
        self.put(d, 0, self.stages[d][chunk], self.nf[d][chunk])

    def can_forward(self, d: int, chunk: int) -> bool:
        """Whether the device's next forward of ``chunk`` has its input and fits in memory."""
        s = self.stages[d][chunk]
        return (self.arrival(0, s, self.nf[d][chunk]) >= 0
                and self.mem[d] + self.delta[0][s] <= self.cap[d] + EPS)

    def put_w(self, d: int) -> None:
        if not self.pending[d]:
            raise ConstructionError(f"device {d}: memory cap reached with no W to run")
        s, j = self.pending[d].popleft()
        self.put(d, 2, s, j, self.end[1][s][j])

    def fill_then_put(self, d: int, k: int, s: int, j: int, may_overspend: bool) -> None:
        """Spend pending W's on the wait for the op's input, then place the op."""
        if j >= self.m:
            raise ConstructionError(f"device {d}: no microbatch left for {_KINDS[k]}{s}")
        ready = self.arrival(k, s, j)
        if ready >= 0:
            w = self.pending[d]
            wdur = self.dur[2]
            while w and ready + EPS >= self.free[d] + wdur[w[0][0]]:
                self.put_w(d)
            wait = ready - self.free[d]
            if w and may_overspend and wait > self.allowance(d) - self.idle[d] + EPS:
                self.put_w(d)
        self.put(d, k, s, j, ready)

    def op_orders(self) -> list[list[Op]]:
        return [[Op(_KINDS[k], s, j) for k, s, j in order] for order in self.orders]


def _build(inst: Instance, rules: FillRules, cap_chunks: int, extra: list[float]) -> _Builder:
    b = _Builder(inst, cap_chunks, extra)
    p, m = b.p, b.m
    unit = [max(inst.activation[s0], inst.activation[s1]) for s0, s1 in b.stages]

    # 1. first chunk-0 forward everywhere
    for d in range(p):
        b.put_forward(d, 0)
    # 2. from the turn back: extra chunk-0 forwards while they end before microbatch 0 returns
    for d in range(p - 1, -1, -1):
        s0, s1 = b.stages[d]
        if d < p - 1:
            back = b.arrival(0, s1, 0)
            if back < 0:
                raise ConstructionError(f"device {d}: chunk 1 of microbatch 0 not on its way")
            while (b.mem[d] + unit[d] * (2 + 2 * d) <= b.cap[d] + EPS
                   and b.free[d] + inst.F[s0] <= back + EPS
                   and b.nf[d][0] < m):
                for j in range(d + 1):
                    b.put_forward(j, 0)
        b.put_forward(d, 1)
    # 3. catch-up forwards, fed from the turn side, alternating chunks. With equal stages
    # every such forward has its input and fits; with uneven stages one may not, and it is
    # skipped (the steady state picks it up) rather than breaking the construction.
    chunk = 0
    for d in range(1, p):
        stuck = 0
        while (sum(b.nf[d]) < sum(b.nf[d - 1])
               or b.nf[d][1] <= b.nf[d - 1][1] < m):
            placed = 0
            for j in range(p - 1, d - 1, -1):
                if b.nf[j][chunk] < m and b.can_forward(j, chunk):
                    b.put_forward(j, chunk)
                    placed += 1
            chunk = 1 - chunk
            stuck = 0 if placed else stuck + 1
            if stuck == 2:
                raise ConstructionError(f"device {d}: catch-up phase cannot place a forward")
    # 4. steady state and cool-down: one input backward per device per round, then a forward
    for _ in range(2 * m):
        up, down = [], []
        for d in range(p):
            s0 = b.stages[d][0]
            n_down, n_up = b.ni[d]
            if n_up >= n_down:
                down.append(d)
            elif d == p - 1 or n_down >= m or b.placed(1, s0 + 1, n_up):
                up.append(d)
            else:
                down.append(d)
        for d in reversed(up):
            b.fill_then_put(d, 1, b.stages[d][0], b.ni[d][1], may_overspend=True)
        for d in down:
            b.fill_then_put(d, 1, b.stages[d][1], b.ni[d][0], may_overspend=rules.before_i)
        for d in range(p):
            s0, s1 = b.stages[d]
            f0, f1 = b.nf[d]
            if f1 >= m:
                continue
            if f1 >= f0:
                chunk = 0
            elif d == p - 1 or b.placed(0, s1 - 1, f1):
                chunk = 1
            elif f0 < m and (d == 0 or b.placed(0, s0 - 1, f0)):
                chunk = 0
            else:
                continue
            s = b.stages[d][chunk]
            while b.mem[d] + inst.activation[s] > b.cap[d] + EPS:
                b.put_w(d)
            b.fill_then_put(d, 0, s, b.nf[d][chunk], may_overspend=rules.before_f)
    # 5. the W's left
    for d in range(p):
        while b.pending[d]:
            b.put_w(d)
    return b


def construct(inst: Instance, rules: FillRules, cap_chunks: int | None = None) -> Construction:
    """One fill setting, refined by bubble allowances while the worst idle improves.

    Raises ConstructionError where the phased rules do not apply (see the class doc).
    """
    cap = 2 * inst.devices if cap_chunks is None else cap_chunks
    last = _build(inst, rules, cap, [0.0] * inst.devices)
    best, passes = last, 1
    for k in range(2, MAX_PASSES + 1):
        extra = [last.worst - x for x in last.idle]
        nxt = _build(inst, rules, cap, extra)
        if nxt.worst >= last.worst - EPS:
            break
        best = last = nxt
        passes = k
    span = [e - s for e, s in zip(best.free, best.first)]
    return Construction(best.op_orders(), best.idle, span, max(best.free), rules, passes)


def candidates(inst: Instance, cap_chunks: int | None = None) -> list[Construction]:
    """Every fill setting that the construction accepts for this instance (maybe none),
    in ``ALL_RULES`` order; the authors keep the one with the least worst idle."""
    out = []
    for rules in ALL_RULES:
        try:
            out.append(construct(inst, rules, cap_chunks))
        except ConstructionError:
            continue
    return out


__all__ = ["ALL_RULES", "Construction", "ConstructionError", "FillRules", "candidates",
           "construct"]
