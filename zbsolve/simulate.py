"""The simulator: the single judge of every schedule zbsolve reads or writes.

Given per-device op orders it runs each op as soon as possible (device free and inputs arrived)
and reports the timeline, makespan, spans, both bubble rates, idle time and the memory curve.
Structural errors raise ``ScheduleError`` with a message a person can act on; memory over the
limit is reported in the result (``feasible``) and raised by ``validate``.

Memory model (per logical stage s, per microbatch): F start allocates activation[s]; I end frees
activation[s] - weight[s]; W end frees weight[s]. All memory events of a device happen at the
boundaries of its own ops, so the peak depends on the order only, not on the timing.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from zbsolve.dag import all_ops, deps, earliest_starts
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule

EPS = 1e-9


class ScheduleError(ValueError):
    """An invalid schedule; the message says what is wrong and where."""


def _few(items: list[str], n: int = 10) -> str:
    return ", ".join(items[:n]) + (" ..." if len(items) > n else "")


@dataclass
class SimResult:
    start: dict[Op, float]
    end: dict[Op, float]
    makespan: float
    span: list[float]  # per device: first start to last end
    busy: list[float]  # per device: total op time
    idle: list[float]  # per device: makespan - busy
    bubble_makespan: float  # 1 - total work / (p * makespan)
    bubble_span: float  # 1 - total work / (p * longest per-device span): the ZB papers' metric
    peak_memory: list[float]
    peak_time: list[float]
    memory_curve: list[list[tuple[float, float]]]  # per device: (time, memory after the event)
    limit: list[float | None]
    violations: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def max_span(self) -> float:
        return max(self.span)

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
        }


def _check_structure(inst: Instance, sched: Schedule) -> None:
    if sched.devices != inst.devices:
        raise ScheduleError(
            f"schedule has {sched.devices} device rows, the instance has {inst.devices} devices"
        )
    seen: Counter[Op] = Counter()
    where: dict[int, set[int]] = {}
    for d, order in enumerate(sched.orders):
        for op in order:
            seen[op] += 1
            if not (0 <= op.stage < inst.stages and 0 <= op.mb < inst.microbatches):
                raise ScheduleError(
                    f"op {op} on device {d} is out of range: stages 0..{inst.stages - 1}, "
                    f"microbatches 0..{inst.microbatches - 1}"
                )
            where.setdefault(op.stage, set()).add(d)
    for stage, devs in sorted(where.items()):
        if len(devs) > 1:
            raise ScheduleError(
                f"stage {stage} runs on devices {sorted(devs)}; a stage lives on one device"
            )
        (d,) = devs
        if d != inst.placement[stage]:
            raise ScheduleError(
                f"stage {stage} is scheduled on device {d} but the instance places it on "
                f"device {inst.placement[stage]}"
            )
    dup = sorted(str(op) for op, n in seen.items() if n > 1)
    if dup:
        raise ScheduleError(f"duplicate op(s): {_few(dup)}")
    fused_and_split = sorted(
        f"{op.stage}B{op.mb}" for op in seen if op.kind == "B"
        and (Op("I", op.stage, op.mb) in seen or Op("W", op.stage, op.mb) in seen)
    )
    if fused_and_split:
        raise ScheduleError(f"backward run both fused (B) and split (I/W): {_few(fused_and_split)}")
    missing = [
        str(op) for op in all_ops(inst)
        if op not in seen and (op.kind == "F" or Op("B", op.stage, op.mb) not in seen)
    ]
    if missing:
        raise ScheduleError(f"{len(missing)} missing op(s): {_few(missing)}")
    for d, order in enumerate(sched.orders):
        done_i: set[tuple[int, int]] = set()
        for pos, op in enumerate(order):
            if op.kind == "I":
                done_i.add((op.stage, op.mb))
            elif op.kind == "W" and (op.stage, op.mb) not in done_i:
                raise ScheduleError(
                    f"device {d} position {pos}: {op} comes before its input backward "
                    f"{Op('I', op.stage, op.mb)}"
                )


def _run(inst: Instance, sched: Schedule) -> tuple[dict[Op, float], dict[Op, float]]:
    """ASAP execution of the fixed orders; raises on deadlock, naming every blocked device."""
    p = inst.devices
    orders = sched.orders
    pos = [0] * p
    free = [0.0] * p
    start: dict[Op, float] = {}
    end: dict[Op, float] = {}
    ready: dict[Op, float] = {}  # DAG op (F or I) -> when its output is available
    waiting: dict[Op, list[int]] = {}
    queue = deque(range(p))
    while queue:
        d = queue.popleft()
        order = orders[d]
        while pos[d] < len(order):
            op = order[pos[d]]
            t = free[d]
            blocked = None
            for pred, delay in deps(inst, op):
                r = ready.get(pred)
                if r is None:
                    blocked = pred
                    break
                t = max(t, r + delay)
            if blocked is not None:
                waiting.setdefault(blocked, []).append(d)
                break
            start[op] = t
            end[op] = free[d] = t + inst.duration(op.kind, op.stage)
            pos[d] += 1
            if op.kind != "W":
                produced = op if op.kind == "F" else Op("I", op.stage, op.mb)
                ready[produced] = end[op]
                queue.extend(waiting.pop(produced, ()))
    if any(pos[d] < len(orders[d]) for d in range(p)):
        lines = []
        for d in range(p):
            if pos[d] < len(orders[d]):
                op = orders[d][pos[d]]
                need = [q for q, _ in deps(inst, op) if q not in ready]
                lines.append(
                    f"device {d} waits at position {pos[d]} on {op}, which needs "
                    + ", ".join(f"{q} (device {inst.placement[q.stage]})" for q in need)
                )
        raise ScheduleError("deadlock: " + "; ".join(lines))
    return start, end


def _memory(
    inst: Instance, sched: Schedule, start: dict[Op, float], end: dict[Op, float]
) -> tuple[list[float], list[float], list[list[tuple[float, float]]], list[str]]:
    peaks, peak_times, curves, violations = [], [], [], []
    for d, order in enumerate(sched.orders):
        mem = peak = peak_t = 0.0
        curve = [(0.0, 0.0)]
        limit = inst.limit[d]
        first_over: tuple[float, Op, float] | None = None
        for op in order:
            s = op.stage
            if op.kind == "F":
                mem += inst.activation[s]
                curve.append((start[op], mem))
                if mem > peak + EPS:
                    peak, peak_t = mem, start[op]
                if limit is not None and mem > limit + EPS and first_over is None:
                    first_over = (start[op], op, mem)
            elif op.kind == "I":
                mem -= inst.activation[s] - inst.weight[s]
                curve.append((end[op], mem))
            elif op.kind == "B":
                mem -= inst.activation[s]
                curve.append((end[op], mem))
            else:
                mem -= inst.weight[s]
                curve.append((end[op], mem))
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
    _check_structure(inst, sched)
    start, end = _run(inst, sched)
    p = inst.devices
    makespan = max(end.values())
    busy = [sum(end[op] - start[op] for op in order) for order in sched.orders]
    span = [end[o[-1]] - start[o[0]] if o else 0.0 for o in sched.orders]
    total = inst.total_work
    peaks, peak_times, curves, violations = _memory(inst, sched, start, end)
    return SimResult(
        start=start,
        end=end,
        makespan=makespan,
        span=span,
        busy=busy,
        idle=[makespan - b for b in busy],
        bubble_makespan=1.0 - total / (p * makespan),
        bubble_span=1.0 - total / (p * max(span)),
        peak_memory=peaks,
        peak_time=peak_times,
        memory_curve=curves,
        limit=list(inst.limit),
        violations=violations,
    )


def validate(inst: Instance, sched: Schedule) -> SimResult:
    """Simulate and also reject a schedule whose memory exceeds the instance's limit."""
    result = simulate(inst, sched)
    if result.violations:
        raise ScheduleError("; ".join(result.violations))
    return result


def device_lower_bounds(inst: Instance) -> list[float]:
    """Per device: earliest possible first start + total work (+ shortest possible tail)."""
    est = earliest_starts(inst)
    bounds = []
    for d in range(inst.devices):
        stages = inst.stages_of(d)
        first = min(est[Op("F", s, mb)] for s in stages for mb in range(inst.microbatches))
        bounds.append(first + inst.device_work(d))
    return bounds
