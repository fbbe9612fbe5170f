"""The simulator: the single judge of every schedule zbsolve reads or writes.

Given per-device job orders it runs each job as soon as possible (device free and inputs
arrived, ``zbsolve.graph``'s dependencies and delays) and reports the timeline, makespan, spans,
both bubble rates, idle time and the memory curve. Jobs that no device runs (the replicas'
gradient all-reduce) start as soon as their inputs are done and count in the makespan.
Structural errors raise ``ScheduleError`` with a message a person can act on; memory over the
limit is reported in the result (``feasible``) and raised by ``validate``.

Memory is the task graph's lifetimes (per unit: F's start allocates the activation, I's end
frees activation - weight, W's end frees weight, a fused B's end frees it all; the memory modes
add theirs) plus the device's resident ``params``. Events are taken in time order, frees before
allocations at the same instant, which is how the CP-SAT model's cumulative intervals count
them, so copies running next to compute are counted where they start and end.

Streams: a device row lists its compute jobs and its copies (offload's O and L) in the order
they are issued. Each stream of the device (``TaskGraph.stream``: compute, and one or two copy
streams) runs its own jobs in row order, as soon as possible; streams of one device run side by
side. The row also says when memory moves, in two rules (the events a runtime records):

- a load L starts no earlier than the end of the compute job written before it (it is issued
  when that job is done, as PipeOffload triggers its prefetch), so a load written late runs
  late instead of holding its memory from the moment its copy out ended;
- a job that allocates (a forward, a recompute, a load) written after a copy out O starts no
  earlier than O's end (what O frees is free by then), so it never counts on memory still in
  flight; an I or W written after it does not wait.

A load is written after its own copy out, with two copy streams too (a runtime issues a
device's copies in row order; ``_copy_order_errors``).

With these two rules a row sorted as a timed schedule's jobs run (``zbsolve.solver.model``)
times every allocation after every free it came after, so its memory is never higher here.
Busy time, spans and bubbles are the compute stream's. A device's span runs from its head,
the earliest any schedule can start it (``TaskGraph.device_heads``), to its last end, so a
device that starts late does not shorten it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from zbsolve.graph import COMPUTE, START, TaskGraph
from zbsolve.instance import Instance
from zbsolve.numeric import REL_TOL, exceeds
from zbsolve.ops import STEP_BOUNDARY_KINDS, Entry, Kind, Op, Pair, ops_of
from zbsolve.schedule import Schedule

OBJECTIVES = ("makespan", "span")
_DEVICE_KINDS = frozenset(k.value for k in (Kind.F, Kind.I, Kind.W, Kind.B, Kind.R, Kind.RS,
                                             Kind.O, Kind.L))


class ScheduleError(ValueError):
    """An invalid schedule; the message says what is wrong and where."""


def _few(items: list[str], n: int = 10) -> str:
    return ", ".join(items[:n]) + (" ..." if len(items) > n else "")


@dataclass
class SimResult:
    start: dict[Op, float]
    end: dict[Op, float]
    makespan: float
    span: list[float]  # per device: its head (earliest possible start) to its last end
    busy: list[float]  # per device: total job time
    idle: list[float]  # per device: makespan - busy
    bubble_makespan: float  # 1 - busy time / (p * makespan)
    bubble_span: float  # 1 - busy time / (p * longest per-device span): the ZB papers' metric
    peak_memory: list[float]
    peak_time: list[float]
    memory_curve: list[list[tuple[float, float]]]  # per device: (time, memory after the event)
    limit: list[float | None]
    pipeline_end: float  # end of the last F/I/W/B (= makespan in mode none)
    violations: list[str] = field(default_factory=list)
    step_mode: str = "none"  # the step boundary (zbsolve.step) these figures include

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def max_span(self) -> float:
        return max(self.span)

    def value(self, objective: str) -> float:
        """The figure an objective minimizes: ``makespan`` or ``span`` (longest device span)."""
        if objective == "makespan":
            return self.makespan
        if objective == "span":
            return self.max_span
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")

    def summary(self) -> dict:
        """The figures every command prints (simulator's numbers, never anyone else's)."""
        return {
            "makespan": self.makespan,
            "span": self.max_span,
            "bubble_makespan": self.bubble_makespan,
            "bubble_span": self.bubble_span,
            "peak_memory": self.peak_memory,
            "memory_limit": self.limit,
            "feasible": self.feasible,
            "idle": self.idle,
            **({"step": self.step_summary()} if self.step_mode != "none" else {}),
        }

    def step_summary(self) -> dict:
        """The step boundary's share: makespan and spans include it, ``pipeline_end`` does not."""
        return {"mode": self.step_mode, "pipeline_end": self.pipeline_end,
                "boundary": self.makespan - self.pipeline_end}


def _check_structure(inst: Instance, graph: TaskGraph, sched: Schedule) -> None:
    """Rows, ranges, placement, duplicates, fused-and-split, missing ops, in one pass.

    Written for speed (it runs on every schedule every layer emits): per op only a range and
    placement test; the full walk over the graph's ops happens only when a count is off.
    """
    if sched.devices != inst.devices:
        raise ScheduleError(
            f"schedule has {sched.devices} device rows, the instance has {inst.devices} devices"
        )
    n, m, segs, R, S1 = inst.stages, inst.microbatches, graph.segments, inst.replicas, inst.model_stages
    placement = inst.placement
    seen: set[Op] = set()
    dup: list[str] = []
    fused_units = 0
    for d, order in enumerate(sched.orders):
        for entry in order:
            if type(entry) is Pair:
                if graph.pair_factor(entry) is None:
                    raise ScheduleError(f"device {d}: {entry} cannot run overlapped: "
                                        + _pair_refusal(inst, entry))
                ops: tuple[Op, ...] = entry
            else:
                ops = (entry,)
            for op in ops:
                kind, s, j, g = op
                if kind not in _DEVICE_KINDS:
                    if kind == Kind.SYNC:
                        raise ScheduleError(f"device {d}: {op} is the replicas' all-reduce; it "
                                            "runs on no device, so schedules do not list it")
                    if kind in STEP_BOUNDARY_KINDS:
                        raise ScheduleError(
                            f"device {d}: {op} is a step-boundary job; schedules do not list "
                            "them (reductions run on no device, every device runs its optimizer "
                            "steps after its last job: zbsolve.graph, the tail rule)")
                    raise ScheduleError(f"device {d}: {op} is not an op kind a device runs")
                if not (0 <= s < n and 0 <= j < m and 0 <= g < segs):
                    raise ScheduleError(
                        f"op {op} on device {d} is out of range: stages 0..{n - 1}, "
                        f"microbatches 0..{m - 1}"
                        + (f", segments 0..{segs - 1}" if segs > 1 else ""))
                if R > 1 and j % R != s // S1:
                    r = s // S1
                    raise ScheduleError(
                        f"op {op} on device {d}: stage {s} is replica {r}'s copy, which "
                        f"runs microbatches j with j mod {R} = {r}")
                if placement[s] != d:
                    _placement_error(inst, sched)
                if op in seen:
                    dup.append(str(op))
                seen.add(op)
                fused_units += kind == "B"
    if dup:
        raise ScheduleError(f"duplicate op(s): {_few(sorted(set(dup)))}")
    if fused_units:
        both = sorted(str(op) for op in seen if op[0] == "B"
                      and (op._replace(kind="I") in seen or op._replace(kind="W") in seen))
        if both:
            raise ScheduleError(f"backward run both fused (B) and split (I/W): {_few(both)}")
    expected = graph.count() - sum(1 for _ in graph.implicit_ops()) \
        - sum(1 for _ in graph.tail_ops())
    if len(seen) != expected:
        missing = [str(op) for op in graph.ops() if op not in seen
                   and graph.device(op) is not None and not graph.is_tail(op)]
        raise ScheduleError(f"{len(missing)} missing op(s): {_few(missing)}")


@dataclass
class Lanes:
    """Each device's row split into its streams, in row order: the lanes the simulator runs,
    the compute streams first (lane d = device d's compute stream); (device, stream) of each
    lane; and per job the ops whose end it waits for besides its inputs (module docstring:
    a load, the compute job before it; a job after a copy out, that copy out)."""

    rows: list[list[Entry]]
    where: list[tuple[int, int]]
    waits_for: dict[Entry, list[Op]]


def allocates(entry: Entry) -> bool:
    """Whether a job allocates memory when it starts: a forward (alone or in a pair), a
    recompute, a load."""
    kind = ops_of(entry)[0].kind
    return kind == "F" or kind == "R" or kind == "RS" or kind == "L"


def lanes(graph: TaskGraph, sched: Schedule) -> Lanes:
    rows = sched.orders
    where = [(d, COMPUTE) for d in range(len(rows))]
    if not graph.copy_streams:
        return Lanes(rows, where, {})
    compute: list[list[Entry]] = []
    copies: dict[tuple[int, int], list[Entry]] = {}
    waits_for: dict[Entry, list[Op]] = {}
    for d, row in enumerate(rows):
        mine: list[Entry] = []
        last_out: Op | None = None
        for entry in row:
            stream = COMPUTE if type(entry) is Pair else graph.stream(entry)
            wait = [last_out] if last_out is not None and allocates(entry) else []
            if stream == COMPUTE:
                mine.append(entry)
            else:
                copies.setdefault((d, stream), []).append(entry)
                if entry[0] == "L" and mine:
                    wait.append(ops_of(mine[-1])[0])
                if entry[0] == "O":
                    last_out = entry
            if wait:
                waits_for[entry] = wait
        compute.append(mine)
    keys = sorted(copies)
    return Lanes(compute + [copies[k] for k in keys], where + keys, waits_for)


def _placement_error(inst: Instance, sched: Schedule) -> None:
    """Raise for the lowest stage that is on several devices or on the wrong one."""
    where: dict[int, set[int]] = {}
    for d, row in enumerate(sched.orders):
        for entry in row:
            for op in ops_of(entry):
                where.setdefault(op.stage, set()).add(d)
    for stage, devs in sorted(where.items()):
        if len(devs) > 1:
            raise ScheduleError(
                f"stage {stage} runs on devices {sorted(devs)}; a stage lives on one device")
        (d,) = devs
        if d != inst.placement[stage]:
            raise ScheduleError(
                f"stage {stage} is scheduled on device {d} but the instance places it on "
                f"device {inst.placement[stage]}")


def _order_errors(graph: TaskGraph, sched: Schedule) -> None:
    """A clearer message for one kind of deadlock: an op placed before an input of its own
    unit on the same stream of its device (a W before its I; an I before its R, a load
    before its copy out: the other such inputs, all of a memory mode's ops)."""
    for d, order in enumerate(sched.orders):
        done: set[Op] = set()
        for pos, entry in enumerate(order):
            for op in ops_of(entry):
                for pred, _ in graph.preds(op):
                    if (pred.unit == op.unit and pred not in done and pred.kind != Kind.F
                            and graph.stream(pred) == graph.stream(op)):
                        raise ScheduleError(
                            f"device {d} position {pos}: {op} comes before its input "
                            + (f"backward {pred}" if pred.kind == Kind.I else
                               f"{pred} (row order is the order a stream runs its jobs in)"))
            done.update(ops_of(entry))


def _copy_order_errors(graph: TaskGraph, sched: Schedule) -> None:
    """A load written before its own copy out, with two copy streams (with one, the deadlock
    check names it). Each stream would wait for the other, but a runtime issues a device's
    copies in row order: the load would wait on an event not yet recorded, and the executor
    table's P2P check refuses the row too."""
    if graph.copy_streams != 2:
        return
    for d, order in enumerate(sched.orders):
        seen: set[Op] = set()
        for pos, entry in enumerate(order):
            for op in ops_of(entry):
                if op.kind == Kind.L and op._replace(kind=Kind.O) not in seen:
                    raise ScheduleError(
                        f"device {d} position {pos}: {op} comes before its input "
                        f"{op._replace(kind=Kind.O)} (a device issues its copies in row order)")
                seen.add(op)


def _pair_refusal(inst: Instance, pair: Pair) -> str:
    fwd, bwd = pair
    if fwd.kind != Kind.F or bwd.kind not in (Kind.I, Kind.B):
        return "a pair is a forward then an I or B"
    if fwd.mb == bwd.mb:
        return "its two halves belong to the same microbatch"
    if inst.overlap is None:
        return "the instance allows no overlapped F&B (set overlap: {FB: x})"
    return (f"the instance's overlap table has no factor for forward stage {fwd.stage} with "
            f"backward stage {bwd.stage} on one device")


def _run(graph: TaskGraph, sched: Schedule, split: Lanes
         ) -> tuple[dict[Op, float], dict[Op, float]]:
    """ASAP execution of the fixed orders (per lane: a device's compute stream or one of its
    copy streams, ``lanes``); raises on deadlock, naming every blocked device."""
    orders, where, waits_for = split.rows, split.where, split.waits_for
    p = len(orders)
    pos = [0] * p
    free = [0.0] * p
    start: dict[Op, float] = {}
    end: dict[Op, float] = {}
    waiting: dict[Op, list[int]] = {}
    implicit_left = {op: len(graph.preds(op)) for op in graph.implicit_ops()}
    queue = deque(range(p))
    preds, duration = graph.preds, graph.duration
    implicit = graph.has_implicit

    def done(op: Op) -> None:
        if op in waiting:
            queue.extend(waiting.pop(op))
        if not implicit:
            return
        for nxt in graph.implicit_successors(op):
            implicit_left[nxt] -= 1
            if implicit_left[nxt] == 0:
                t = max(end[q] + delay for q, delay in preds(nxt))  # op is one of them
                start[nxt], end[nxt] = t, t + duration(nxt)
                done(nxt)

    while queue:
        d = queue.popleft()
        order = orders[d]
        while pos[d] < len(order):
            entry = order[pos[d]]
            ops = entry if type(entry) is Pair else (entry,)
            t = free[d]
            blocked = None
            for op in ops:
                for pred, delay in preds(op):
                    r = end.get(pred)
                    if r is None:
                        blocked = pred
                        break
                    if r + delay > t:
                        t = r + delay
                if blocked is not None:
                    break
            if waits_for and blocked is None and entry in waits_for:
                for q in waits_for[entry]:
                    r = end.get(q)
                    if r is None:
                        blocked = q
                        break
                    if r > t:
                        t = r
            if blocked is not None:
                waiting.setdefault(blocked, []).append(d)
                break
            finish = free[d] = t + (duration(entry) if len(ops) == 1 else graph.job_duration(entry))
            pos[d] += 1
            for op in ops:
                start[op] = t
                end[op] = finish
            for op in ops:
                done(op)
    if any(pos[d] < len(orders[d]) for d in range(p)):
        _order_errors(graph, sched)
        lines = []
        for d in range(p):
            if pos[d] < len(orders[d]):
                entry = orders[d][pos[d]]
                need = [q for op in ops_of(entry) for q, _ in graph.preds(op) if q not in end]
                after = [q for q in waits_for.get(entry, ()) if q not in end]
                dev, stream = where[d]
                why = []
                if need:
                    why.append("which needs " + ", ".join(
                        f"{q} (device {graph.device(q)})" for q in need))
                if after:  # a row-order rule of the copy streams (module docstring)
                    why.append("which waits for " + ", ".join(map(str, after))
                               + " written before it")
                lines.append(
                    f"device {dev}{' copy stream' if stream != COMPUTE else ''} waits at "
                    f"position {pos[d]} on {entry}, " + " and ".join(why))
        raise ScheduleError("deadlock: " + "; ".join(lines))
    if graph.has_step:
        _run_tails(graph, sched, start, end)
    return start, end


def _run_tails(graph: TaskGraph, sched: Schedule, start: dict[Op, float],
               end: dict[Op, float]) -> None:
    """The tail rule (``zbsolve.graph``): after its order, each device runs its optimizer steps,
    earliest ready first. Their inputs are implicit ops, all timed by now; nothing waits for
    them."""
    preds, duration = graph.preds, graph.duration
    for d, order in enumerate(sched.orders):
        free = end[ops_of(order[-1])[0]]  # rows are never empty (_check_structure)
        ready = [(max(end[q] + c for q, c in preds(op)), op.stage, op)  # OPT has inputs
                 for op in graph.tail_ops(d)]
        for release, _, op in sorted(ready):
            t = max(free, release)
            start[op], end[op] = t, t + duration(op)
            free = end[op]


def _memory(
    inst: Instance, graph: TaskGraph, start: dict[Op, float], end: dict[Op, float]
) -> tuple[list[float], list[float], list[list[tuple[float, float]]], list[str]]:
    peaks, peak_times, curves, violations = [], [], [], []
    for d in range(inst.devices):
        events: list[tuple[float, int, float, Op]] = []
        for lt in graph.device_lifetimes(d):
            born = start[lt.born] if lt.born_at == START else end[lt.born]
            dies = start[lt.dies] if lt.dies_at == START else end[lt.dies]
            events.append((born, 1, lt.amount, lt.born))
            events.append((dies, 0, -lt.amount, lt.dies))
        events.sort(key=lambda e: (e[0], e[1]))  # frees before allocations at one instant
        mem = peak = inst.resident(d)
        peak_t = 0.0
        curve = [(0.0, mem)]
        limit = inst.limit[d]
        first_over: tuple[float, Op, float] | None = None
        for t, _, delta, op in events:
            mem += delta
            curve.append((t, mem))
            if delta > 0:
                if mem - peak > REL_TOL * max(abs(peak), abs(mem)):
                    peak, peak_t = mem, t
                if first_over is None and exceeds(mem, limit):
                    first_over = (t, op, mem)
        if first_over is not None:
            t, op, m_at = first_over
            violations.append(
                f"device {d} exceeds its memory limit {limit:g}: reaches {m_at:g} at t={t:g} "
                f"when {op} starts (over by {m_at - limit:g}); its peak is {peak:g}"
            )
        peaks.append(peak)
        peak_times.append(peak_t)
        curves.append(curve)
    return peaks, peak_times, curves, violations


def simulate(inst: Instance, sched: Schedule) -> SimResult:
    """Run ``sched`` on ``inst``; raise ScheduleError on structural errors or deadlock."""
    try:
        graph = TaskGraph.of(inst, sched.ops())
    except ValueError as exc:  # a unit with the ops of two memory modes
        raise ScheduleError(str(exc)) from None
    _check_structure(inst, graph, sched)
    _copy_order_errors(graph, sched)
    split = lanes(graph, sched)
    start, end = _run(graph, sched, split)
    rows = split.rows
    p = inst.devices
    makespan = max(end.values())
    compute = rows[:p]  # the devices' compute streams (copies run beside them)
    busy = [sum(graph.job_duration(e) for e in order)
            + sum(graph.duration(op) for op in graph.tail_ops(d))
            for d, order in enumerate(compute)]
    # rows are never empty: every device holds a stage, and all its ops are listed; a span is
    # measured from the device's head, not its first start (``TaskGraph.device_heads``)
    span = [max([end[ops_of(o[-1])[0]], *(end[op] for op in graph.tail_ops(d))]) - h
            for d, (o, h) in enumerate(zip(compute, graph.device_heads()))]
    work = sum(busy)
    peaks, peak_times, curves, violations = _memory(inst, graph, start, end)
    return SimResult(
        start=start,
        end=end,
        makespan=makespan,
        span=span,
        busy=busy,
        idle=[makespan - b for b in busy],
        bubble_makespan=1.0 - work / (p * makespan),
        bubble_span=1.0 - work / (p * max(span)),
        peak_memory=peaks,
        peak_time=peak_times,
        memory_curve=curves,
        limit=list(inst.limit),
        violations=violations,
        step_mode=graph.step_mode,
        pipeline_end=max(end[ops_of(order[-1])[0]] for order in sched.orders),
    )


def validate(inst: Instance, sched: Schedule) -> SimResult:
    """Simulate and also reject a schedule whose memory exceeds the instance's limit."""
    result = simulate(inst, sched)
    if result.violations:
        raise ScheduleError("; ".join(result.violations))
    return result
