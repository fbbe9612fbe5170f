"""The instance: what the user's model and cluster look like to a scheduler.

Loading is strict because a silently repaired instance yields a schedule for a model the user
does not have: every error names the field and says what is expected.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zbsolve import size_limits as sizes
from zbsolve.io import InputFileError, atomic_write_text, json_data_errors, read_data

PLACEMENTS = ("loop", "v")
INSTANCE_SUFFIXES = (".yaml", ".yml", ".json")
_TOP_KEYS = {
    "name", "devices", "microbatches", "chunks", "placement", "times", "comm", "memory",
    # optional, free-form extras that travel with the instance but change nothing
    "description", "source", "meta",
}
_TIME_KEYS = {"F", "I", "W"}
_MEMORY_KEYS = {"activation", "weight", "limit"}


class InstanceError(ValueError):
    """Bad instance input; the message names the field and the fix."""


@dataclass(frozen=True)
class Instance:
    name: str
    devices: int  # p
    microbatches: int  # m
    chunks: int  # v
    placement: tuple[int, ...]  # logical stage -> device
    placement_kind: str  # loop | v | explicit
    F: tuple[float, ...]  # per logical stage
    I: tuple[float, ...]  # noqa: E741 - the papers' name
    W: tuple[float, ...]
    comm: float = 0.0
    activation: tuple[float, ...] = ()  # per stage, allocated at F start
    weight: tuple[float, ...] = ()  # per stage, kept from I end until W end
    limit: tuple[float | None, ...] = ()  # per device, None = unlimited
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    _by_device: tuple[tuple[int, ...], ...] = field(
        default=(), init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # stages_of is called per device in loops over devices: a map, not a scan of placement
        rows: list[list[int]] = [[] for _ in range(self.devices)]
        for s, d in enumerate(self.placement):
            if 0 <= d < self.devices:
                rows[d].append(s)
        object.__setattr__(self, "_by_device", tuple(tuple(r) for r in rows))

    # ------------------------------------------------------------------ derived
    @property
    def stages(self) -> int:
        return len(self.placement)

    @property
    def p(self) -> int:
        return self.devices

    @property
    def m(self) -> int:
        return self.microbatches

    @property
    def v(self) -> int:
        return self.chunks

    def duration(self, kind: str, stage: int) -> float:
        if kind == "B":
            return self.I[stage] + self.W[stage]
        return getattr(self, kind)[stage]

    def stages_of(self, device: int) -> list[int]:
        """The logical stages on ``device``, ascending (precomputed: O(stages on it))."""
        return list(self._by_device[device])

    def device_work(self, device: int) -> float:
        return self.m * sum(self.F[s] + self.I[s] + self.W[s] for s in self.stages_of(device))

    @property
    def total_work(self) -> float:
        return self.m * sum(self.F[s] + self.I[s] + self.W[s] for s in range(self.stages))

    def hop(self, src_stage: int, dst_stage: int) -> float:
        """Latency of a hand-off between two stages: zero when they share a device."""
        same = self.placement[src_stage] == self.placement[dst_stage]
        return 0.0 if same else self.comm

    @property
    def uniform(self) -> bool:
        return all(len(set(t)) == 1 for t in (self.F, self.I, self.W))

    def with_(self, **changes: Any) -> Instance:
        """A modified copy, re-validated (e.g. ``inst.with_(limit=(8.0,)*p)``)."""
        data = self.to_dict()
        for key, value in changes.items():
            if key in ("F", "I", "W"):
                data["times"][key] = list(value) if not _is_number(value) else value
            elif key in ("activation", "weight", "limit"):
                data.setdefault("memory", {})[key] = (
                    list(value) if isinstance(value, (list, tuple)) else value
                )
            else:
                data[key] = value
        return Instance.from_dict(data)

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict[str, Any]:
        def compact(values: tuple) -> Any:
            return values[0] if len(set(values)) == 1 else list(values)

        placement: Any = (
            self.placement_kind if self.placement_kind in PLACEMENTS else list(self.placement)
        )
        limit: Any = None
        if any(x is not None for x in self.limit):
            limit = compact(self.limit)
        data: dict[str, Any] = {
            "name": self.name,
            "devices": self.devices,
            "microbatches": self.microbatches,
            "chunks": self.chunks,
            "placement": placement,
            "times": {k: compact(getattr(self, k)) for k in ("F", "I", "W")},
            "comm": self.comm,
            "memory": {
                "activation": compact(self.activation),
                "weight": compact(self.weight),
                "limit": limit,
            },
        }
        data.update(self.extra)
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Instance:
        return _parse(data)

    def dump(self, path: str | Path) -> None:
        """Write as JSON (``.json``) or YAML (``.yaml``/``.yml``), atomically."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in INSTANCE_SUFFIXES:
            raise InstanceError(
                f"{path}: an instance file is .yaml, .yml or .json (the name picks the format)")
        text = (
            json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
            if suffix == ".json"
            else yaml.safe_dump(self.to_dict(), sort_keys=False)
        )
        atomic_write_text(path, text)


def load_instance(source: str | Path | dict[str, Any]) -> Instance:
    """Load an instance from a YAML/JSON file (or an already parsed dict)."""
    if isinstance(source, dict):
        return _parse(source)
    path = Path(source)
    try:  # .json as JSON, else strict YAML; one-line errors naming the file
        data = read_data(path, "instance file")
    except InputFileError as exc:
        raise InstanceError(str(exc)) from None
    if not isinstance(data, dict):
        raise InstanceError(
            f"{path}: expected a mapping of instance fields at the top level, got "
            f"{type(data).__name__}")
    data.setdefault("name", path.stem)
    try:
        return _parse(data)
    except (InstanceError, sizes.SizeLimitError) as exc:
        raise InstanceError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------- parsing helpers
def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(data: dict, key: str, default: int | None = None, minimum: int = 1) -> int:
    value = data.get(key, default)
    if value is None:
        raise InstanceError(f"{key}: required, expected an integer >= {minimum}")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InstanceError(f"{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _per(
    value: Any, n: int, field_name: str, what: str, positive: bool = True
) -> tuple[float, ...]:
    """A number for all, or a list of exactly n numbers."""
    if _is_number(value):
        values = [float(value)] * n
    elif isinstance(value, (list, tuple)):
        if len(value) != n:
            raise InstanceError(
                f"{field_name}: expected one number per {what} ({n}), got a list of {len(value)}"
            )
        values = list(value)
    else:
        raise InstanceError(f"{field_name}: expected a number or a list of {n} numbers, got {value!r}")
    for i, x in enumerate(values):
        if not _is_number(x):
            raise InstanceError(f"{field_name}[{i}]: expected a number, got {x!r}")
        if positive and x <= 0:
            raise InstanceError(f"{field_name}[{i}]: must be > 0, got {x}")
        if not positive and x < 0:
            raise InstanceError(f"{field_name}[{i}]: must be >= 0, got {x}")
    return tuple(float(x) for x in values)


def placement_for(kind: str, p: int, v: int) -> tuple[int, ...]:
    """Stage -> device for the named placements (stage s = chunk c * p + position j)."""
    if kind == "loop":
        return tuple(s % p for s in range(p * v))
    if kind == "v":
        return tuple((s % p) if (s // p) % 2 == 0 else p - 1 - (s % p) for s in range(p * v))
    raise InstanceError(f"placement: expected 'loop', 'v' or a list of device ids, got {kind!r}")


def _check_sizes(p: int, m: int, v: int) -> None:
    """Refuse, before anything is built, an instance above the stated size limits."""
    sizes.check_size("devices", p, sizes.MAX_DEVICES)
    sizes.check_size("microbatches", m, sizes.MAX_MICROBATCHES)
    sizes.check_size("chunks", v, sizes.MAX_CHUNKS)
    sizes.check_size("stages (devices*chunks)", p * v, sizes.MAX_STAGES)
    sizes.check_size("ops (3*stages*microbatches)", 3 * p * v * m, sizes.MAX_OPS)


def _check_range(field_name: str, values: tuple[float, ...], zero_ok: bool = False) -> None:
    for i, x in enumerate(values):
        if x == 0 and zero_ok:
            continue
        if not sizes.MIN_VALUE <= x <= sizes.MAX_VALUE:
            raise InstanceError(
                f"{field_name}[{i}]: {x:g} is outside [{sizes.MIN_VALUE:g}, "
                f"{sizes.MAX_VALUE:g}]; pick a unit in which the values are moderate")


def _check_time_ratio(F: tuple, I: tuple, W: tuple) -> None:  # noqa: E741
    values = F + I + W
    lo, hi = min(values), max(values)
    if hi / lo > 1 / sizes.MIN_POSITIVE:
        raise InstanceError(
            f"times: the largest ({hi:g}) is more than {1 / sizes.MIN_POSITIVE:g} times the "
            f"smallest ({lo:g}); the solver cannot resolve both at once")


def _parse(data: dict[str, Any]) -> Instance:
    if not isinstance(data, dict):
        raise InstanceError(f"expected a mapping of instance fields, got {type(data).__name__}")
    bad_keys = sorted(repr(k) for k in data if not isinstance(k, str))
    if bad_keys:
        raise InstanceError(f"top-level key(s) {', '.join(bad_keys)} must be strings")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise InstanceError(
            f"unknown key(s) {sorted(unknown)}; allowed top-level keys: {sorted(_TOP_KEYS)}"
        )
    raw_name = data.get("name", "instance")
    if not isinstance(raw_name, (str, int, float)) or isinstance(raw_name, bool):
        raise InstanceError(f"name: expected a string, got {raw_name!r}")
    name = str(raw_name)
    p = _int(data, "devices")
    m = _int(data, "microbatches")
    v = _int(data, "chunks", default=1)
    _check_sizes(p, m, v)
    S = p * v

    raw_placement = data.get("placement", "loop")
    if isinstance(raw_placement, str):
        kind = raw_placement
        placement = placement_for(kind, p, v)
    elif isinstance(raw_placement, (list, tuple)):
        kind = "explicit"
        if len(raw_placement) != S:
            raise InstanceError(
                f"placement: an explicit placement lists one device per logical stage "
                f"(devices*chunks = {S}), got {len(raw_placement)}"
            )
        for s, d in enumerate(raw_placement):
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < p:
                raise InstanceError(
                    f"placement[{s}]: device id must be an integer in [0, {p - 1}], got {d!r}"
                )
        placement = tuple(raw_placement)
        empty = sorted(set(range(p)) - set(placement))
        if empty:
            raise InstanceError(
                f"placement: device(s) {empty} hold no stage; every device needs at least one"
            )
    else:
        raise InstanceError(
            f"placement: expected 'loop', 'v' or a list of device ids, got {raw_placement!r}"
        )

    times = data.get("times")
    if not isinstance(times, dict):
        raise InstanceError("times: required mapping with keys F, I, W (per-stage durations)")
    unknown = set(times) - _TIME_KEYS
    missing = _TIME_KEYS - set(times)
    if unknown:
        raise InstanceError(f"times: unknown key(s) {sorted(unknown)}; expected F, I, W")
    if missing:
        raise InstanceError(f"times: missing {sorted(missing)}; F, I and W are all required")
    F, I, W = (_per(times[k], S, f"times.{k}", "logical stage") for k in ("F", "I", "W"))
    for key, values in (("F", F), ("I", I), ("W", W)):
        _check_range(f"times.{key}", values)
    _check_time_ratio(F, I, W)

    comm = data.get("comm", 0.0)
    if not _is_number(comm) or comm < 0:
        raise InstanceError(f"comm: expected a number >= 0, got {comm!r}")
    _check_range("comm", (float(comm),), zero_ok=True)

    memory = data.get("memory") or {}
    if not isinstance(memory, dict):
        raise InstanceError(f"memory: expected a mapping (activation, weight, limit), got {memory!r}")
    unknown = set(memory) - _MEMORY_KEYS
    if unknown:
        raise InstanceError(
            f"memory: unknown key(s) {sorted(unknown)}; expected activation, weight, limit"
        )
    activation = _per(memory.get("activation", 1.0), S, "memory.activation", "logical stage")
    weight = _per(memory.get("weight", 0.0), S, "memory.weight", "logical stage", positive=False)
    _check_range("memory.activation", activation)
    _check_range("memory.weight", weight, zero_ok=True)
    for s, (a, w) in enumerate(zip(activation, weight)):
        if w > a:
            raise InstanceError(
                f"memory.weight[{s}]: {w} exceeds memory.activation[{s}] = {a}; the part kept "
                "for W is a part of the activation, so weight <= activation"
            )
    raw_limit = memory.get("limit")
    if raw_limit is None:
        limit: tuple[float | None, ...] = (None,) * p
    else:
        limit = _per(raw_limit, p, "memory.limit", "device")
        _check_range("memory.limit", limit)

    extra = {k: data[k] for k in ("description", "source", "meta") if k in data}
    problems = json_data_errors(extra, "")
    if problems:  # the instance travels inside every schedule and table written as JSON
        raise InstanceError(problems[0].lstrip("."))
    return Instance(
        name=name, devices=p, microbatches=m, chunks=v, placement=placement,
        placement_kind=kind, F=F, I=I, W=W, comm=float(comm),
        activation=activation, weight=weight, limit=limit, extra=extra,
    )
