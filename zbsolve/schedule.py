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

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbsolve.ops import Entry, Kind, Op, Pair, ops_of, parse_entry

FORMAT = SCHEDULE_FORMAT = "zbsolve-schedule"
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
        """Parse strictly (see ``parse_schedule_dict``); ValueError names the field."""
        return parse_schedule_dict(data)

    def dump(self, path: str | Path) -> None:
        """Write the schedule JSON atomically (temp file beside it, then rename)."""
        from zbsolve.io import write_json

        write_json(path, self.to_dict())


_KEYS = {"format", "version", "name", "orders", "starts", "meta"}


class ScheduleFileError(ValueError):
    """A schedule file or dict that is not a schedule; the message names the field."""


def parse_schedule_dict(data: Any) -> Schedule:
    """A schedule from its JSON form, refusing anything it could silently get wrong: unknown
    keys, formats or versions, non-string ops, ``starts`` that do not cover every op, and sizes
    above ``zbsolve.size_limits``."""
    from zbsolve import size_limits as sizes

    if not isinstance(data, dict):
        raise ScheduleFileError(
            f"schedule: expected a JSON object with 'orders', got {_kind(data)}")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise ScheduleFileError(
            f"schedule: unknown key(s) {unknown}; allowed: {sorted(_KEYS)}")
    fmt = data.get("format", SCHEDULE_FORMAT)
    if fmt != SCHEDULE_FORMAT:
        raise ScheduleFileError(
            f"format: expected {SCHEDULE_FORMAT!r} (or an executor table), got {fmt!r}")
    version = data.get("version", FORMAT_VERSION)
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise ScheduleFileError(
            f"version: this zbsolve reads schedules of version {FORMAT_VERSION}, got {version!r}")
    name = data.get("name", "schedule")
    if not isinstance(name, str):
        raise ScheduleFileError(f"name: expected a string, got {name!r}")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise ScheduleFileError(f"meta: expected an object, got {type(meta).__name__}")
    if "orders" not in data:
        raise ScheduleFileError("schedule: missing 'orders' (a list of per-device op lists)")
    rows = data["orders"]
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise ScheduleFileError("orders: expected a list of per-device lists of op tokens")
    sizes.check_size("orders: devices", len(rows), sizes.MAX_DEVICES)
    sizes.check_size("orders: ops", sum(len(r) for r in rows), sizes.MAX_OPS)
    orders: list[list[Entry]] = []
    for d, row in enumerate(rows):
        entries: list[Entry] = []
        for i, tok in enumerate(row):
            if not isinstance(tok, str):
                raise ScheduleFileError(
                    f"orders[{d}][{i}]: expected an op token string like '3F12', got {tok!r}")
            try:
                entries.append(parse_entry(tok))
            except ValueError as exc:
                raise ScheduleFileError(f"schedule: orders[{d}][{i}]: {exc}") from None
        orders.append(entries)
    starts = None
    if "starts" in data:
        starts = _parse_starts(data["starts"], orders)
    return Schedule(orders, name, starts, meta)


def _parse_starts(raw: Any, orders: list[list[Entry]]) -> dict[Op, float]:
    """One start per job (a pair's two ops share theirs)."""
    import math

    if not isinstance(raw, list) or len(raw) != len(orders):
        got = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise ScheduleFileError(
            f"starts: expected one list per device row ({len(orders)}), got {got}")
    starts: dict[Op, float] = {}
    for d, (order, times) in enumerate(zip(orders, raw)):
        if not isinstance(times, list) or len(times) != len(order):
            got = len(times) if isinstance(times, list) else repr(times)
            raise ScheduleFileError(f"starts[{d}]: expected {len(order)} numbers, got {got}")
        for i, t in enumerate(times):
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                raise ScheduleFileError(f"starts[{d}][{i}]: expected a finite number, got {t!r}")
        for entry, t in zip(order, times):
            for op in ops_of(entry):
                starts[op] = float(t)
    return starts


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


def _kind(value: Any) -> str:
    """JSON's name for the type of a parsed value."""
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
             str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)
