"""The schedule: per device, the ordered list of jobs it runs (optionally with start times).

This is the one representation every layer shares: generators and the solver produce it, the
simulator judges it, exporters lower it. A job is an op or an overlapped pair (``ops.Pair``).
Start times are advisory: the simulator recomputes them as-soon-as-possible from the order,
which can only be earlier for the same order.

The transforms of the IR live here too: ``split_backward`` (B -> I then W) and
``fuse_backward`` (I immediately followed by its W -> B). Reading schedule *files* of other
formats (executor tables, torch CSVs) is the export layer's job (``zbsolve.export.files``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbsolve.ops import Entry, Kind, Op, Pair, ops_of, parse_entry

FORMAT = "zbsolve-schedule"
FORMAT_VERSION = 1


@dataclass
class Schedule:
    orders: list[list[Entry]]  # orders[device] = jobs in execution order
    name: str = "schedule"
    starts: dict[Op, float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return len(self.orders)

    def __len__(self) -> int:
        """The number of ops (a pair counts as two)."""
        return sum(len(ops_of(e)) for row in self.orders for e in row)

    def ops(self) -> Iterator[Op]:
        for row in self.orders:
            for entry in row:
                yield from ops_of(entry)

    def device_ops(self, device: int) -> Iterator[Op]:
        for entry in self.orders[device]:
            yield from ops_of(entry)

    @property
    def has_pairs(self) -> bool:
        return any(isinstance(e, Pair) for row in self.orders for e in row)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "orders": [[str(e) for e in order] for order in self.orders],
        }
        if self.starts is not None:
            data["starts"] = [[self.starts[ops_of(e)[0]] for e in order] for order in self.orders]
        if self.meta:
            data["meta"] = self.meta
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Schedule:
        if "orders" not in data:
            raise ValueError("schedule: missing 'orders' (a list of per-device op lists)")
        orders: list[list[Entry]] = []
        for d, row in enumerate(data["orders"]):
            entries: list[Entry] = []
            for i, tok in enumerate(row):
                try:
                    entries.append(parse_entry(tok))
                except ValueError as exc:
                    raise ValueError(f"schedule: orders[{d}][{i}]: {exc}") from None
            orders.append(entries)
        starts = None
        if "starts" in data:
            starts = {}
            for d, (order, times) in enumerate(zip(orders, data["starts"])):
                if len(order) != len(times):
                    raise ValueError(f"schedule: starts[{d}] has {len(times)} entries for {len(order)} ops")
                for entry, t in zip(order, times):
                    for op in ops_of(entry):
                        starts[op] = float(t)
        return Schedule(orders, data.get("name", "schedule"), starts, data.get("meta", {}))

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


# ---------------------------------------------------------------------- transforms
def split_backward(sched: Schedule) -> Schedule:
    """Replace fused B ops by I then W in place: the same order, never later, never more memory
    (I hands its gradient on earlier; the memory freed at B's end is freed by then anyway).
    A B inside an overlapped pair stays: splitting it would change the pair's job."""
    if not any(isinstance(e, Op) and e.kind == Kind.B for row in sched.orders for e in row):
        return sched
    rows = [
        [x for e in row for x in ((e._replace(kind=Kind.I), e._replace(kind=Kind.W))
                                  if isinstance(e, Op) and e.kind == Kind.B else (e,))]
        for row in sched.orders
    ]
    return Schedule(rows, name=f"{sched.name}+split")


def unpair(sched: Schedule) -> Schedule:
    """Each overlapped pair as its two halves, forward first: how a runtime without an overlap
    kernel runs it (torch's OVERLAP_F_B without a registered function)."""
    if not sched.has_pairs:
        return sched
    rows = [[op for e in row for op in ops_of(e)] for row in sched.orders]
    return Schedule(rows, sched.name, None, dict(sched.meta))


def fuse_backward(sched: Schedule) -> Schedule:
    """Replace each I immediately followed by the W of the same unit with one B."""
    orders = []
    for order in sched.orders:
        out: list[Entry] = []
        i = 0
        while i < len(order):
            e = order[i]
            nxt = order[i + 1] if i + 1 < len(order) else None
            if isinstance(e, Op) and e.kind == Kind.I and nxt == e._replace(kind=Kind.W):
                out.append(e._replace(kind=Kind.B))
                i += 2
            else:
                out.append(e)
                i += 1
        orders.append(out)
    return Schedule(orders, sched.name, None, dict(sched.meta))
