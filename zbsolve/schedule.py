"""The schedule: per device, the ordered list of ops it runs (optionally with start times).

This is the one representation every layer shares: generators and the solver produce it, the
simulator judges it, exporters lower it. Start times are advisory: the simulator recomputes
them as-soon-as-possible from the order, which can only be earlier for the same order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbsolve.ops import Op, parse_op

FORMAT_VERSION = 1


@dataclass
class Schedule:
    orders: list[list[Op]]  # orders[device] = ops in execution order
    name: str = "schedule"
    starts: dict[Op, float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return len(self.orders)

    def __len__(self) -> int:
        return sum(len(o) for o in self.orders)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": "zbsolve-schedule",
            "version": FORMAT_VERSION,
            "name": self.name,
            "orders": [[str(op) for op in order] for order in self.orders],
        }
        if self.starts is not None:
            data["starts"] = [[self.starts[op] for op in order] for order in self.orders]
        if self.meta:
            data["meta"] = self.meta
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Schedule:
        if "orders" not in data:
            raise ValueError("schedule: missing 'orders' (a list of per-device op lists)")
        orders: list[list[Op]] = []
        for d, row in enumerate(data["orders"]):
            ops: list[Op] = []
            for i, tok in enumerate(row):
                try:
                    ops.append(parse_op(tok))
                except ValueError as exc:
                    raise ValueError(f"schedule: orders[{d}][{i}]: {exc}") from None
            orders.append(ops)
        starts = None
        if "starts" in data:
            starts = {}
            for d, (order, times) in enumerate(zip(orders, data["starts"])):
                if len(order) != len(times):
                    raise ValueError(f"schedule: starts[{d}] has {len(times)} entries for {len(order)} ops")
                starts.update(zip(order, map(float, times)))
        return Schedule(orders, data.get("name", "schedule"), starts, data.get("meta", {}))

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


def load_schedule(path: str | Path) -> Schedule:
    """Load a schedule JSON (ours) or a torch pipelining CSV (by extension)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        from zbsolve.export.torch_csv import read_torch_csv  # lazy: optional layer

        return read_torch_csv(path)
    data = json.loads(path.read_text())
    if data.get("format") == "zbsolve-executor":
        from zbsolve.export.executor import schedule_from_table

        return schedule_from_table(data)
    sched = Schedule.from_dict(data)
    if sched.name == "schedule":
        sched.name = path.stem
    return sched
