"""The schedule: per device, the ordered list of ops it runs (optionally with start times).

This is the one representation every layer shares: generators and the solver produce it, the
simulator judges it, exporters lower it. Start times are advisory: the simulator recomputes
them as-soon-as-possible from the order, which can only be earlier for the same order.
"""

from __future__ import annotations

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
        """Parse strictly (see ``parse_schedule_dict``); ValueError names the field."""
        return parse_schedule_dict(data)

    def dump(self, path: str | Path) -> None:
        """Write the schedule JSON atomically (temp file beside it, then rename)."""
        from zbsolve.io import write_json

        write_json(path, self.to_dict())


SCHEDULE_FORMAT = "zbsolve-schedule"
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
    orders: list[list[Op]] = []
    for d, row in enumerate(rows):
        ops: list[Op] = []
        for i, tok in enumerate(row):
            if not isinstance(tok, str):
                raise ScheduleFileError(
                    f"orders[{d}][{i}]: expected an op token string like '3F12', got {tok!r}")
            try:
                ops.append(parse_op(tok))
            except ValueError as exc:
                raise ScheduleFileError(f"schedule: orders[{d}][{i}]: {exc}") from None
        orders.append(ops)
    starts = None
    if "starts" in data:
        starts = _parse_starts(data["starts"], orders)
    return Schedule(orders, name, starts, meta)


def _parse_starts(raw: Any, orders: list[list[Op]]) -> dict[Op, float]:
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
        starts.update(zip(order, map(float, times)))
    return starts


def load_schedule(path: str | Path) -> Schedule:
    """Load a schedule JSON (ours), an executor table JSON, or a torch pipelining CSV (by
    extension); every error is one line naming the file and the field."""
    from zbsolve.io import parse_json, read_text

    path = Path(path)
    if path.suffix.lower() == ".csv":
        from zbsolve.export.torch_csv import read_torch_csv  # lazy: optional layer

        return read_torch_csv(path)
    data = parse_json(read_text(path, "schedule file"), str(path))
    if isinstance(data, dict) and data.get("format") == "zbsolve-executor":
        from zbsolve.export.executor import ExecutorError, schedule_from_table

        try:
            return schedule_from_table(data)
        except (ExecutorError, KeyError, TypeError, ValueError) as exc:
            raise ScheduleFileError(f"{path}: {exc}") from None
    try:
        sched = Schedule.from_dict(data)
    except ValueError as exc:
        raise ScheduleFileError(f"{path}: {exc}") from None
    if sched.name == "schedule" and (not isinstance(data, dict) or "name" not in data):
        sched.name = path.stem
    return sched


def _kind(value: Any) -> str:
    """JSON's name for the type of a parsed value."""
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
             str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)
