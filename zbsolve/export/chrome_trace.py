"""Chrome / Perfetto trace JSON of a simulated schedule (open in ui.perfetto.dev or chrome://tracing).

One process "zbsolve <schedule>", one thread track per device (tid = device), one complete
("X") event per op, and one counter ("C") track per device with its memory curve. Offload
copies run beside the compute, on the device's copy stream: they get a track of their own
(tid = p + device), so no two events of a track overlap. Trace
timestamps are microseconds; instance times are multiplied by ``scale`` (default 1000, i.e. the
instance unit is read as milliseconds, as in the reference instances). The exact predicted
times are kept in each event's args.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zbsolve.instance import Instance
from zbsolve.io import write_json
from zbsolve.modes import COPY_KINDS
from zbsolve.ops import ops_of
from zbsolve.schedule import Schedule

KIND_NAMES = {"F": "forward", "I": "backward-input", "W": "backward-weight", "B": "full-backward",
              "R": "recompute", "RS": "selective-recompute", "O": "copy-out", "L": "load-back"}


def trace_events(
    inst: Instance, sched: Schedule, *, scale: float = 1000.0, table: Any = None
) -> dict[str, Any]:
    """The trace as a dict; validates the schedule with the simulator first.

    ``table`` (an ExecutorTable lowered from this schedule) adds its SEND/RECV actions as
    zero-width instant events on the sending and receiving device.
    """
    from zbsolve.simulate import validate

    result = validate(inst, sched)
    pid = 0
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name",
         "args": {"name": f"zbsolve {sched.name} on {inst.name}"}},
    ]
    p = inst.devices
    copies = any(op.kind in COPY_KINDS for op in sched.ops())
    for d in range(p):
        for tid, name in [(d, f"device {d}")] + ([(p + d, f"device {d} copies")] if copies
                                                  else []):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                           "args": {"name": name}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                           "args": {"sort_index": 2 * d + (tid >= p)}})
    for d, order in enumerate(sched.orders):
        chunks = {s: c for c, s in enumerate(inst.stages_of(d))}
        for op in (o for e in order for o in ops_of(e)):
            t0, t1 = result.start[op], result.end[op]
            events.append({
                "ph": "X", "pid": pid, "tid": p + d if op.kind in COPY_KINDS else d,
                "name": str(op), "cat": KIND_NAMES[op.kind],
                "ts": t0 * scale, "dur": (t1 - t0) * scale,
                "args": {"stage": op.stage, "chunk": chunks[op.stage], "microbatch": op.mb,
                         "kind": op.kind, "start": t0, "end": t1},
            })
    for d, curve in enumerate(result.memory_curve):
        for t, mem in curve:
            events.append({"ph": "C", "pid": pid, "name": f"memory device {d}",
                           "ts": t * scale, "args": {"memory": mem}})
    if table is not None:
        for r, row in enumerate(table.actions):
            for a in (a for a in row if a.is_comm):
                events.append({"ph": "i", "s": "t", "pid": pid, "tid": r, "name": a.token,
                               "cat": "p2p", "ts": a.start * scale,
                               "args": {"peer": a.peer, "peer_stage": a.peer_stage,
                                        "start": a.start, "end": a.end, "batch": a.batch}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"schedule": sched.name, "instance": inst.name, **result.summary()},
    }


def write_chrome_trace(
    inst: Instance, sched: Schedule, path: str | Path, *, scale: float = 1000.0,
    table: Any = None,
) -> dict[str, Any]:
    trace = trace_events(inst, sched, scale=scale, table=table)
    write_json(path, trace, indent=None)
    return trace
