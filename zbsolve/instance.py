"""The instance: what the user's model and cluster look like to a scheduler.

Loading is strict because a silently repaired instance yields a schedule for a model the user
does not have: every error names the field and says what is expected.

Memory values are plain numbers in one unit. They may be written with units (``2GiB``, ``80GB``,
``512MiB``; see ``zbsolve.units``): the instance then records its unit in ``memory.unit`` and
converts every value into it, so the rest of zbsolve computes with numbers and the pictures can
name the unit.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zbsolve import size_limits as sizes
from zbsolve.io import InputFileError, atomic_write_text, json_data_errors, read_data
from zbsolve.modes import Mode, Offload, Recompute
from zbsolve.segments import (
    COST_MODELS,
    SegmentError,
    SegmentModel,
    cost_shares,
    length_shares,
    resolve_lengths,
    split,
)
from zbsolve.step import StepError, StepSpec, parse_step
from zbsolve.units import SizeError, check_unit, convert, parse_size

PLACEMENTS = ("loop", "v")
INSTANCE_SUFFIXES = (".yaml", ".yml", ".json")
_TOP_KEYS = {
    "name", "devices", "microbatches", "chunks", "placement", "times", "comm", "memory",
    "replicas", "sync", "overlap", "recompute", "offload",
    "step",  # zbsolve.step: optimizer, reductions and the global check after the last W
    "segments", "segment_lengths", "segment_costs", "segment_model",  # zbsolve.segments
    # optional, free-form extras that travel with the instance but change nothing
    "description", "source", "meta",
}
_TIME_KEYS = {"F", "I", "W"}
_MEMORY_KEYS = {"activation", "weight", "limit", "params", "unit"}
_SIZED_KEYS = ("activation", "weight", "limit", "params")  # what may carry a unit
_OVERLAP_KEYS = {"FB"}
_SEGMENT_MODEL_KEYS = {"seq", "hidden", "heads", "ffn", "vocab", "layers", "attention"}
SegTable = tuple[tuple[float, ...], ...]
"""Per stage, per segment (``table[stage][seg]``)."""
REPLICAS = (1, 2)
_RECOMPUTE_KEYS = ("R", "kept", "R_selective", "kept_selective")
_OFFLOAD_KEYS = ("fraction", "d2h", "h2d", "streams")
COPY_STREAMS = (1, 2)
SEGMENTED = ("F", "I", "W", "activation", "weight")
"""The per-stage figures that have per-segment tables."""


class InstanceError(ValueError):
    """Bad instance input; the message names the field and the fix."""


@dataclass(frozen=True)
class Instance:
    """The user's pipeline: devices, microbatches, per-stage costs and memory.

    Per-stage tables cover the *task graph's* stages: with ``replicas = 2`` (Chimera, DualPipe)
    replica r's copy of model stage s is stage r·S + s and runs on the mirrored device
    p - 1 - d of replica 0's; its tables repeat replica 0's. Files hold replica 0's S values
    (``to_dict`` writes them back that way).
    """

    name: str
    devices: int  # p
    microbatches: int  # m
    chunks: int  # v
    placement: tuple[int, ...]  # stage -> device (all replicas)
    placement_kind: str  # loop | v | explicit
    F: tuple[float, ...]  # per stage
    I: tuple[float, ...]  # noqa: E741 - the papers' name
    W: tuple[float, ...]
    comm: float = 0.0
    activation: tuple[float, ...] = ()  # per stage, allocated at F start
    weight: tuple[float, ...] = ()  # per stage, kept from I end until W end
    limit: tuple[float | None, ...] = ()  # per device, None = unlimited
    replicas: int = 1  # model copies running in opposite directions (1 or 2)
    params: tuple[float, ...] = ()  # per stage: weights resident on its device (default 0)
    sync: tuple[float, ...] = ()  # per stage: the replicas' gradient all-reduce (replicas = 2)
    overlap: tuple[tuple[int, int, float], ...] | float | None = None  # F&B factor (see graph)
    memory_unit: str | None = None  # the unit of every memory figure (None: unnamed)
    recompute: Recompute | None = None  # memory mode recompute offered (zbsolve.modes)
    offload: Offload | None = None  # memory mode offload offered
    step: StepSpec = StepSpec()  # the step boundary (zbsolve.step); default mode none
    # Sequence segments (zbsolve.segments): the per-stage fields above stay whole-microbatch
    # figures; the seg_* tables give each segment's share (table[stage][seg], sums = the
    # per-stage value). Empty tables: split by segment length (one segment: the value itself).
    segments: int = 1
    segment_lengths: tuple[float, ...] = ()  # per segment: tokens (with a model) or relative
    segment_rule: str | tuple[float, ...] = "equal"  # how the lengths were asked for
    segment_costs: str = "length"  # length | prefix (FLOP shares from segment_model)
    segment_model: SegmentModel | None = None
    seg_F: SegTable = ()
    seg_I: SegTable = ()
    seg_W: SegTable = ()
    seg_activation: SegTable = ()
    seg_weight: SegTable = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    _by_device: tuple[tuple[int, ...], ...] = field(
        default=(), init=False, repr=False, compare=False, hash=False)
    _durations: dict[str, SegTable] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)
    _seg: dict[str, SegTable] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Direct construction (tests, dataclasses.replace) may leave the optional tables empty.
        n = len(self.placement)
        for key in ("params", "sync"):
            if not getattr(self, key):
                object.__setattr__(self, key, (0.0,) * n)
        # stages_of and duration run in the simulator's and the schedulers' inner loops: maps,
        # not scans of the placement or attribute lookups by name
        rows: list[list[int]] = [[] for _ in range(self.devices)]
        for s, d in enumerate(self.placement):
            if 0 <= d < self.devices:
                rows[d].append(s)
        object.__setattr__(self, "_by_device", tuple(tuple(r) for r in rows))
        tables = {key: self._segment_table(key) for key in SEGMENTED}
        fused = tuple(tuple(i + w for i, w in zip(ri, rw))
                      for ri, rw in zip(tables["I"], tables["W"]))
        object.__setattr__(self, "_seg", tables)
        object.__setattr__(self, "_durations", {
            "F": tables["F"], "I": tables["I"], "W": tables["W"], "B": fused,
            "SYNC": tuple((x,) for x in self.sync),
            **_mode_durations(self.recompute, self.offload)})

    def _segment_table(self, key: str) -> SegTable:
        """The per-(stage, segment) table of ``key`` (F I W activation weight): the given one,
        checked against the per-stage values, or the per-stage values split by length."""
        whole: tuple[float, ...] = getattr(self, key)
        given: SegTable = getattr(self, f"seg_{key}")
        k = self.segments
        if not given:
            if k == 1:
                return tuple((x,) for x in whole)
            shares = length_shares(self.segment_lengths or (1.0,) * k)
            return tuple(split(x, shares) for x in whole)
        if len(given) != len(whole) or any(len(row) != k for row in given):
            raise ValueError(f"seg_{key}: expected {len(whole)} rows of {k} segments")
        for s, (row, x) in enumerate(zip(given, whole)):
            if abs(sum(row) - x) > 1e-9 * max(1.0, abs(x)):
                raise ValueError(f"seg_{key}[{s}] sums to {sum(row)}, not to {key}[{s}] = {x}: "
                                 "replace the per-segment table with the per-stage value")
        return given

    # ------------------------------------------------------------------ derived
    @property
    def stages(self) -> int:
        """Stages of the task graph: replicas x devices x chunks."""
        return len(self.placement)

    @property
    def model_stages(self) -> int:
        """Stages of one model replica (S = devices x chunks)."""
        return self.devices * self.chunks

    def replica_of(self, stage: int) -> int:
        return stage // self.model_stages

    def microbatches_of(self, stage: int) -> range:
        """The microbatches a stage runs: microbatch j belongs to replica j mod replicas."""
        return range(self.replica_of(stage), self.microbatches, self.replicas)

    @property
    def p(self) -> int:
        return self.devices

    @property
    def m(self) -> int:
        return self.microbatches

    @property
    def v(self) -> int:
        return self.chunks

    def duration(self, kind: str, stage: int, seg: int = 0) -> float:
        """How long an op runs: segment ``seg``'s share of the stage's F, I, W, B (= I + W),
        or the stage's SYNC."""
        return self._durations[kind][stage][seg]

    def segment_table(self, key: str) -> SegTable:
        """``table[stage][seg]`` of F, I, W, activation or weight (one column without segments)."""
        return self._seg[key]

    def segment_memory(self, stage: int, seg: int = 0) -> tuple[float, float]:
        """(activation, weight) of one segment of a stage: what its F allocates and what its I
        keeps for W. A segment's keys and values, which later segments read, are part of its
        activation (they live until its I, which the graph puts after the later segments')."""
        return self._seg["activation"][stage][seg], self._seg["weight"][stage][seg]

    def stages_of(self, device: int) -> list[int]:
        """The stages a device holds, in increasing order (precomputed: O(1))."""
        return list(self._by_device[device])

    @property
    def several_stages_per_device(self) -> bool:
        """Whether some device holds more than one stage (V, interleaved, explicit placements):
        the instances the solver's multi-stage phases (windows, stretch, bound switch) are for."""
        return any(len(stages) > 1 for stages in self._by_device)

    @property
    def plain(self) -> bool:
        """One replica, one sequence segment, no overlapped pairs, no memory modes to choose and
        no step jobs: one op per (kind, stage, microbatch), the instances the solver's stretch
        phase was measured on."""
        return (self.replicas == 1 and self.segments == 1 and self.overlap is None
                and not self.offers_modes and self.step.mode == "none")

    def device_work(self, device: int) -> float:
        """Compute time of a device's ops (every stage runs m / replicas microbatches)."""
        per_mb = sum(self.F[s] + self.I[s] + self.W[s] for s in self._by_device[device])
        return self.microbatches // self.replicas * per_mb

    @property
    def total_work(self) -> float:
        per_mb = sum(self.F[s] + self.I[s] + self.W[s] for s in range(self.stages))
        return self.microbatches // self.replicas * per_mb

    def resident(self, device: int) -> float:
        """Memory the device holds all step long: the weights of its stages (``params``)."""
        return sum(self.params[s] for s in self._by_device[device])

    def hop(self, src_stage: int, dst_stage: int) -> float:
        """Latency of a hand-off between two stages: zero when they share a device."""
        same = self.placement[src_stage] == self.placement[dst_stage]
        return 0.0 if same else self.comm

    @property
    def uniform(self) -> bool:
        return all(len(set(t)) == 1 for t in (self.F, self.I, self.W))

    def overlap_factor(self, forward_stage: int, backward_stage: int) -> float | None:
        """x such that F(forward_stage) and a backward of backward_stage of other microbatches
        may run as one job lasting x times their sum; None where no such pair is allowed."""
        if self.overlap is None or forward_stage == backward_stage:
            return None
        if self.placement[forward_stage] != self.placement[backward_stage]:
            return None
        if isinstance(self.overlap, float):
            return self.overlap
        for a, b, x in self.overlap:
            if (a, b) == (forward_stage, backward_stage):
                return x
        return None

    @property
    def offers_modes(self) -> bool:
        """Whether any unit may run other than keep (the instance has recompute or offload)."""
        return self.recompute is not None or self.offload is not None

    @property
    def modes(self) -> tuple[str, ...]:
        """The memory modes the instance offers (keep always), in ``zbsolve.modes`` order."""
        out = [Mode.KEEP.value]
        if self.recompute is not None:
            out.append(Mode.RECOMPUTE.value)
            if self.recompute.selective:
                out.append(Mode.SELECTIVE.value)
        if self.offload is not None:
            out.append(Mode.OFFLOAD.value)
        return tuple(out)

    def kept(self, stage: int, mode: str) -> float:
        """What a unit of ``stage`` holds between its forward and its backward in ``mode`` (with
        offload: once its copy out has ended)."""
        act = self.activation[stage]
        if mode == Mode.RECOMPUTE:
            return self.recompute.kept[stage]
        if mode == Mode.SELECTIVE:
            return self.recompute.kept_selective[stage]
        if mode == Mode.OFFLOAD:
            return act - self.moved(stage)
        return act

    def moved(self, stage: int) -> float:
        """The part of a unit's activation an offload moves to host and back."""
        return self.offload.fraction[stage] * self.activation[stage]

    def with_modes(self, modes: tuple[str, ...] | list[str]) -> Instance:
        """A copy that offers only ``modes`` of the ones this instance offers (keep always)."""
        unknown = [m for m in modes if m not in self.modes]
        if unknown:
            raise InstanceError(f"modes: {unknown} not offered by instance {self.name!r} "
                                f"(it offers {list(self.modes)}); add the recompute/offload "
                                "fields to the instance")
        rec = self.recompute
        if rec is not None and Mode.RECOMPUTE not in modes and Mode.SELECTIVE not in modes:
            rec = None
        elif rec is not None and Mode.SELECTIVE not in modes:
            rec = dataclasses.replace(rec, R_selective=None, kept_selective=None)
        elif rec is not None and Mode.RECOMPUTE not in modes:
            raise InstanceError("modes: selective without recompute is not supported; offer "
                                "recompute too")
        off = self.offload if Mode.OFFLOAD in modes else None
        return dataclasses.replace(self, recompute=rec, offload=off)

    def with_(self, **changes: Any) -> Instance:
        """A modified copy, re-validated (e.g. ``inst.with_(limit=(8.0,)*p)``).

        Per-stage values are given for one replica (S values), as in files.
        """
        data = self.to_dict()
        if changes.get("segments", self.segments) != self.segments:
            _whole_figures(self, data)  # re-cut: each segment's share comes from the new count
            if "segment_lengths" not in changes:
                refit_segment_lengths(data, changes["segments"])
        for key, value in changes.items():
            if key in ("F", "I", "W"):
                data["times"][key] = list(value) if not _is_number(value) else value
            elif key in ("activation", "weight", "limit", "params"):
                data.setdefault("memory", {})[key] = (
                    list(value) if isinstance(value, (list, tuple)) else value
                )
            else:
                data[key] = value
        return Instance.from_dict(data)

    def with_memory_margin(self, margin: float) -> Instance:
        """A copy whose every memory limit keeps ``margin`` of it free: limit * (1 - margin).

        For ``zbsolve solve --memory-margin``: headroom for what the instance does not model
        (fragmentation, temporary buffers, communication buffers). The copy's ``meta`` records
        the margin and the limits before it. Devices without a limit stay without one.
        """
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) \
                or not 0 <= margin < 1:
            raise InstanceError(f"memory margin: expected a fraction in [0, 1), got {margin!r}")
        if margin == 0:
            return self
        extra = dict(self.extra)
        meta = dict(extra.get("meta") or {})
        meta["memory_margin"] = {"fraction": float(margin), "limit_before": list(self.limit)}
        extra["meta"] = meta
        limit = tuple(None if x is None else x * (1.0 - margin) for x in self.limit)
        return dataclasses.replace(self, limit=limit, extra=extra)

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict[str, Any]:
        S = self.model_stages

        def compact(values: tuple) -> Any:
            values = values[:S] if len(values) == self.stages else values
            return values[0] if len(set(values)) == 1 else list(values)

        placement: Any = (
            self.placement_kind if self.placement_kind in PLACEMENTS else list(self.placement[:S])
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
                **({"unit": self.memory_unit} if self.memory_unit else {}),
            },
        }
        if any(self.params):
            data["memory"]["params"] = compact(self.params)
        if self.replicas != 1:
            data["replicas"] = self.replicas
            data["sync"] = compact(self.sync)
        if self.overlap is not None:
            data["overlap"] = {"FB": self.overlap if isinstance(self.overlap, float)
                               else [list(t) for t in self.overlap]}
        if self.recompute is not None:
            data["recompute"] = self.recompute.to_dict(compact)
        if self.offload is not None:
            data["offload"] = self.offload.to_dict(compact)
        if self.step.given:
            data["step"] = self.step.to_dict(S)
        if self.segments > 1:
            data["times"] = {k: _segment_rows(self, k) for k in ("F", "I", "W")}
            data["memory"].update({k: _segment_rows(self, k) for k in ("activation", "weight")})
        data.update(_segments_to_dict(self))
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


def memory_unit_label(inst: Instance) -> str | None:
    """The unit to label memory with in pictures and tables: ``memory.unit``, else the unit a
    profiler recorded in ``meta.units.memory`` (its files hold plain numbers in MiB); None
    when the instance does not say."""
    if inst.memory_unit:
        return inst.memory_unit
    units = (inst.extra.get("meta") or {}).get("units") or {}
    unit = units.get("memory") if isinstance(units, dict) else None
    return unit if isinstance(unit, str) else None


def _segments_to_dict(inst: Instance) -> dict[str, Any]:
    """The segment keys of a file, and the per-segment tables in place of the per-stage values
    of ``times`` / ``memory`` (lists of k per stage), so a file round-trips exactly."""
    if inst.segments == 1 and inst.segment_model is None and inst.segment_costs == "length" \
            and inst.segment_rule == "equal":
        return {}
    out: dict[str, Any] = {"segments": inst.segments}
    rule = inst.segment_rule
    out["segment_lengths"] = rule if isinstance(rule, str) else [
        int(x) if float(x).is_integer() else x for x in rule]
    if inst.segment_costs != "length":
        out["segment_costs"] = inst.segment_costs
    if inst.segment_model is not None:
        out["segment_model"] = inst.segment_model.to_dict()
    return out


def _segment_rows(inst: Instance, key: str) -> list[list[float]]:
    S = inst.model_stages
    return [list(row) for row in inst.segment_table(key)[:S]]


def refit_segment_lengths(data: dict[str, Any], segments: int) -> None:
    """``data``'s ``segment_lengths`` for another segment count: a rule (equal, balanced)
    applies to any count; a list of lengths is dropped for whole microbatches and refused for
    another split, which it does not describe."""
    lengths = data.get("segment_lengths")
    if not isinstance(lengths, list) or len(lengths) == segments:
        return
    if segments == 1:
        del data["segment_lengths"]
        return
    raise InstanceError(f"segment_lengths: {lengths} gives {len(lengths)} segments, not "
                        f"{segments}; give a rule (equal or balanced) to cut into another count")


def _whole_figures(inst: Instance, data: dict[str, Any]) -> None:
    """Per-stage (whole-microbatch) values in ``data`` in place of per-segment lists."""
    S = inst.model_stages
    data["times"] = {k: list(getattr(inst, k)[:S]) for k in ("F", "I", "W")}
    memory = data.setdefault("memory", {})
    for key in ("activation", "weight"):
        memory[key] = list(getattr(inst, key)[:S])


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


def v_players(inst: Instance) -> tuple[int, ...] | None:
    """For a V (one replica, two chunks), the device that plays V device r for each r: the
    one holding stages r and 2p-1-r (``(0, 1, ..., p-1)`` for ``placement: v``; an explicit
    placement may number the devices otherwise). None where the placement is no V."""
    p, placement = inst.devices, inst.placement
    if inst.chunks != 2 or inst.replicas != 1 or len(placement) != 2 * p:
        return None
    played = tuple(placement[:p])
    if sorted(played) != list(range(p)) or any(
            placement[2 * p - 1 - r] != d for r, d in enumerate(played)):
        return None
    return played


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
    seg = _segment_spec(data, S)
    (F, seg_F), (I, seg_I), (W, seg_W) = (
        _per_segmented(times[k], S, seg, f"times.{k}", k) for k in ("F", "I", "W"))
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
            f"memory: unknown key(s) {sorted(unknown)}; expected activation, weight, limit, params, "
            "unit"
        )
    memory_unit, memory = _memory_in_one_unit(memory)
    activation, seg_act = _per_segmented(memory.get("activation", 1.0), S, seg,
                                         "memory.activation", None)
    weight, seg_wgt = _per_segmented(memory.get("weight", 0.0), S, seg, "memory.weight", None,
                                     positive=False)
    _check_range("memory.activation", activation)
    _check_range("memory.weight", weight, zero_ok=True)
    for s, (a, w) in enumerate(zip(activation, weight)):
        if w > a:
            raise InstanceError(
                f"memory.weight[{s}]: {w} exceeds memory.activation[{s}] = {a}; the part kept "
                "for W is a part of the activation, so weight <= activation"
            )
    for s, (row_a, row_w) in enumerate(zip(seg_act, seg_wgt)):
        for g, (a, w) in enumerate(zip(row_a, row_w)):
            if w > a * (1 + 1e-12):
                raise InstanceError(
                    f"memory.weight[{s}][{g}]: {w} exceeds memory.activation[{s}][{g}] = {a}: a "
                    "segment keeps for W a part of its activation, so weight <= activation")
    raw_limit = memory.get("limit")
    if raw_limit is None:
        limit: tuple[float | None, ...] = (None,) * p
    else:
        limit = _per(raw_limit, p, "memory.limit", "device")
        _check_range("memory.limit", limit)

    params = _per(memory.get("params", 0.0), S, "memory.params", "logical stage", positive=False)
    _check_range("memory.params", params, zero_ok=True)

    replicas = data.get("replicas", 1)
    if isinstance(replicas, bool) or replicas not in REPLICAS:
        raise InstanceError(f"replicas: expected 1 or 2 (model copies in opposite directions), "
                            f"got {replicas!r}")
    if m % replicas:
        raise InstanceError(f"microbatches: with replicas: {replicas} every replica needs the "
                            f"same number of microbatches (microbatch j runs on replica j mod "
                            f"{replicas}); use an even number, e.g. {m + 1}")
    if "sync" in data and replicas == 1:
        raise InstanceError("sync: the gradient all-reduce between replicas needs replicas: 2")
    sync = _per(data.get("sync", 0.0), S, "sync", "logical stage", positive=False)
    _check_range("sync", sync, zero_ok=True)
    overlap = _overlap(data.get("overlap"), S * replicas)
    recompute = _recompute(data.get("recompute"), S, activation)
    offload = _offload(data.get("offload"), S)
    if (recompute is not None or offload is not None) and seg.count > 1:
        raise InstanceError("recompute/offload: memory modes with sequence segments "
                            "(segments > 1) are not supported yet (issue 13); drop the "
                            "segments or the recompute/offload fields")
    step = _step(data.get("step"), S, replicas)

    extra = {k: data[k] for k in ("description", "source", "meta") if k in data}
    problems = json_data_errors(extra, "")
    if problems:  # the instance travels inside every schedule and table written as JSON
        raise InstanceError(problems[0].lstrip("."))
    # Replica r runs model stage s as stage r*S + s on the mirrored device p-1-d.
    placement = tuple(d if r == 0 else p - 1 - d for r in range(replicas) for d in placement)

    def rep(values: tuple) -> tuple:
        return values * replicas

    return Instance(
        name=name, devices=p, microbatches=m, chunks=v, placement=placement,
        placement_kind=kind, F=rep(F), I=rep(I), W=rep(W), comm=float(comm),
        activation=rep(activation), weight=rep(weight), limit=limit, replicas=replicas,
        params=rep(params), sync=rep(sync), overlap=overlap, memory_unit=memory_unit,
        segments=seg.count, segment_lengths=seg.lengths, segment_rule=seg.rule,
        segment_costs=seg.costs, segment_model=seg.model, seg_F=rep(seg_F), seg_I=rep(seg_I),
        seg_W=rep(seg_W), seg_activation=rep(seg_act), seg_weight=rep(seg_wgt), step=step,
        recompute=_replicated(recompute, replicas), offload=_replicated(offload, replicas),
        extra=extra,
    )


def _mode_durations(rec: Recompute | None, off: Offload | None) -> dict[str, tuple]:
    """Per op kind of the memory modes, its duration table (``Instance.duration``)."""
    out: dict[str, tuple] = {}
    if rec is not None:
        out["R"] = rec.R
        if rec.selective:
            out["RS"] = rec.R_selective
    if off is not None:
        out["O"], out["L"] = off.d2h, off.h2d
    return {kind: tuple((x,) for x in table) for kind, table in out.items()}  # one segment


def _replicated(spec: Any, replicas: int) -> Any:
    """A mode spec whose per-stage tables cover every replica (replica 0's values repeated)."""
    if spec is None or replicas == 1:
        return spec
    changes = {f.name: getattr(spec, f.name) * replicas for f in dataclasses.fields(spec)
               if isinstance(getattr(spec, f.name), tuple)}
    return dataclasses.replace(spec, **changes)


def _mode_mapping(raw: Any, name: str, keys: tuple[str, ...], required: tuple[str, ...],
                  meaning: str) -> None:
    """The shape both memory modes' fields share: a mapping of known keys with the required
    ones present (each message names the field and what it means)."""
    if not isinstance(raw, dict):
        raise InstanceError(f"{name}: expected a mapping with {' and '.join(required)} (per "
                            f"stage), got {raw!r}")
    unknown = set(raw) - set(keys)
    if unknown:
        raise InstanceError(f"{name}: unknown key(s) {sorted(unknown)}; expected "
                            f"{', '.join(keys)}")
    for key in required:
        if key not in raw:
            raise InstanceError(f"{name}.{key}: required ({meaning})")


def _recompute(raw: Any, S: int, activation: tuple[float, ...]) -> Recompute | None:
    """``recompute: {R, kept[, R_selective, kept_selective]}``: what recomputing costs and keeps."""
    if raw is None:
        return None
    _mode_mapping(raw, "recompute", _RECOMPUTE_KEYS, ("R", "kept"),
                  "R: the time to recompute a forward; kept: what a recomputed forward keeps, "
                  "its checkpoint")
    if ("R_selective" in raw) != ("kept_selective" in raw):
        raise InstanceError("recompute: R_selective and kept_selective go together (the "
                            "selective variant's time and what it keeps)")

    def kept_of(key: str) -> tuple[float, ...]:
        kept = _per(raw[key], S, f"recompute.{key}", "logical stage", positive=False)
        _check_range(f"recompute.{key}", kept, zero_ok=True)
        for s, (k, a) in enumerate(zip(kept, activation)):
            if k > a:
                raise InstanceError(f"recompute.{key}[{s}]: {k} exceeds memory.activation[{s}] "
                                    f"= {a}; what a recomputed forward keeps is part of its "
                                    "activation")
        return kept

    R = _per(raw["R"], S, "recompute.R", "logical stage")
    _check_range("recompute.R", R)
    if "R_selective" not in raw:
        return Recompute(R, kept_of("kept"))
    R_sel = _per(raw["R_selective"], S, "recompute.R_selective", "logical stage")
    _check_range("recompute.R_selective", R_sel)
    return Recompute(R, kept_of("kept"), R_sel, kept_of("kept_selective"))


def _offload(raw: Any, S: int) -> Offload | None:
    """``offload: {fraction, d2h[, h2d][, streams]}``: what moves to host and how fast."""
    if raw is None:
        return None
    _mode_mapping(raw, "offload", _OFFLOAD_KEYS, ("d2h",),
                  "the time to copy a stage's activation share to host; h2d, the copy back, "
                  "defaults to it")
    fraction = _per(raw.get("fraction", 1.0), S, "offload.fraction", "logical stage")
    for s, f in enumerate(fraction):
        if f > 1:
            raise InstanceError(f"offload.fraction[{s}]: {f} is more than the whole activation; "
                                "expected a share in (0, 1]")
    d2h = _per(raw["d2h"], S, "offload.d2h", "logical stage")
    h2d = _per(raw.get("h2d", raw["d2h"]), S, "offload.h2d", "logical stage")
    _check_range("offload.d2h", d2h)
    _check_range("offload.h2d", h2d)
    streams = raw.get("streams", 1)
    if isinstance(streams, bool) or streams not in COPY_STREAMS:
        raise InstanceError(f"offload.streams: expected 1 (one copy stream per device) or 2 "
                            f"(one per direction), got {streams!r}")
    return Offload(fraction, d2h, h2d, streams)

def _step(raw: Any, model_stages: int, replicas: int) -> StepSpec:
    try:
        return parse_step(raw, model_stages, replicas)
    except StepError as exc:
        raise InstanceError(str(exc)) from None


# ---------------------------------------------------------------------- segments
@dataclass(frozen=True)
class _SegmentSpec:
    """The segment keys of a file, parsed: how many, how long, what they cost."""

    count: int
    lengths: tuple[float, ...]
    rule: str | tuple[float, ...]
    costs: str
    model: SegmentModel | None

    def shares(self, stage: int, kind: str | None) -> tuple[float, ...]:
        """Each segment's share of a stage's whole figure: time (``kind``) by the cost model,
        memory (``kind`` None) by length."""
        if kind is None or self.costs == "length":
            return length_shares(self.lengths)
        return cost_shares(self.model, self.lengths, stage, kind)


def _segment_spec(data: dict[str, Any], S: int) -> _SegmentSpec:
    """``segments``, ``segment_lengths``, ``segment_costs`` and ``segment_model``."""
    k = _int(data, "segments", default=1)
    raw_model = data.get("segment_model")
    model = None if raw_model is None else _segment_model(raw_model, S)
    costs = data.get("segment_costs", "length")
    if costs not in COST_MODELS:
        raise InstanceError(f"segment_costs: expected one of {', '.join(COST_MODELS)} (length: a "
                            f"segment costs its share of the tokens; prefix: its share of the "
                            f"FLOPs, from segment_model), got {costs!r}")
    if costs == "prefix" and model is None:
        raise InstanceError("segment_costs: prefix needs the model shape: add segment_model "
                            "with seq, hidden and layers (per stage), and heads, ffn, vocab")
    rule = data.get("segment_lengths", "equal")
    if not isinstance(rule, (str, list, tuple)):
        raise InstanceError(f"segment_lengths: expected equal, balanced or a list of {k} lengths, "
                            f"got {rule!r}")
    try:
        lengths = resolve_lengths(rule, k, model)
    except SegmentError as exc:
        raise InstanceError(str(exc)) from None
    kept = rule if isinstance(rule, str) else tuple(float(x) for x in rule)
    return _SegmentSpec(k, lengths, kept, costs, model)


def _segment_model(raw: Any, S: int) -> SegmentModel:
    """``segment_model: {seq, hidden, layers, heads, ffn, vocab, attention}``."""
    if not isinstance(raw, dict):
        raise InstanceError(f"segment_model: expected a mapping with seq, hidden, layers (and "
                            f"heads, ffn, vocab, attention), got {raw!r}")
    unknown = set(raw) - _SEGMENT_MODEL_KEYS
    if unknown:
        raise InstanceError(f"segment_model: unknown key(s) {sorted(unknown)}; expected "
                            f"{sorted(_SEGMENT_MODEL_KEYS)}")

    def integer(key: str, default: int | None, minimum: int) -> int | None:
        value = raw.get(key, default)
        if value is None and default is None and key not in ("seq", "hidden"):
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InstanceError(f"segment_model.{key}: expected an integer >= {minimum}, "
                                f"got {value!r}")
        return value

    seq, hidden = integer("seq", None, 1), integer("hidden", None, 1)
    heads, ffn, vocab = integer("heads", None, 1), integer("ffn", None, 1), integer("vocab", 0, 0)
    assert seq is not None and hidden is not None and vocab is not None
    if heads is not None and hidden % heads:
        raise InstanceError(f"segment_model.heads: hidden ({hidden}) must be divisible by heads "
                            f"({heads})")
    raw_layers = raw.get("layers")
    items = raw_layers if isinstance(raw_layers, list) else [raw_layers] * S
    if len(items) != S:
        raise InstanceError(f"segment_model.layers: expected one number per logical stage ({S}), "
                            f"got a list of {len(items)}")
    for s, n in enumerate(items):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InstanceError(f"segment_model.layers[{s}]: expected the decoder layers of "
                                f"stage {s}, an integer >= 0, got {n!r}")
        if n == 0 and not (s == S - 1 and vocab):
            raise InstanceError(f"segment_model.layers[{s}]: stage {s} needs at least one layer "
                                "(only the last stage may hold the LM head alone, with vocab)")
    attention = raw.get("attention", "causal")
    if attention not in ("causal", "dense"):
        raise InstanceError(f"segment_model.attention: expected causal (kernels that skip masked "
                            f"blocks) or dense (masked dense attention), got {attention!r}")
    return SegmentModel(seq=seq, hidden=hidden, layers=tuple(items), heads=heads, ffn=ffn,
                        vocab=vocab, attention=attention)


def _per_segmented(value: Any, n: int, seg: _SegmentSpec, field_name: str, kind: str | None,
                   positive: bool = True) -> tuple[tuple[float, ...], SegTable]:
    """Per-stage whole-microbatch values, and per-segment tables (empty with one segment).

    ``value``: a number for all stages, or a list of n entries, each a number (the whole
    microbatch's, split across the segments by ``seg.shares``) or, with segments > 1, a list of
    one number per segment.
    """
    k = seg.count
    nested = isinstance(value, (list, tuple)) and any(isinstance(x, (list, tuple)) for x in value)
    if not nested:
        whole = _per(value, n, field_name, "logical stage", positive)
        if k == 1:
            return whole, ()
        return whole, tuple(split(x, seg.shares(s, kind)) for s, x in enumerate(whole))
    if len(value) != n:
        raise InstanceError(f"{field_name}: expected one entry per logical stage ({n}), got a list "
                            f"of {len(value)}")
    totals, rows = [], []
    for s, item in enumerate(value):
        where = f"{field_name}[{s}]"
        if isinstance(item, (list, tuple)):
            if k == 1:
                raise InstanceError(f"{where}: a list of per-segment values needs segments > 1; "
                                    "give one number per stage")
            if len(item) != k:
                raise InstanceError(f"{where}: expected one number per segment ({k}), got a list "
                                    f"of {len(item)}")
            row = _per(list(item), k, where, "segment", positive)
        else:
            if not _is_number(item):
                raise InstanceError(f"{where}: expected a number or a list of {k} numbers (one "
                                    f"per segment), got {item!r}")
            (total,) = _per(item, 1, where, "logical stage", positive)
            row = split(total, seg.shares(s, kind)) if k > 1 else (total,)
        rows.append(row)
        totals.append(math.fsum(row))
    return tuple(totals), (tuple(rows) if k > 1 else ())


def _overlap(raw: Any, stages: int) -> tuple[tuple[int, int, float], ...] | float | None:
    """``overlap: {FB: x}`` (every forward/backward pair of one device's different stages) or
    ``overlap: {FB: [[forward stage, backward stage, x], ...]}`` (only those pairs)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != _OVERLAP_KEYS:
        raise InstanceError(f"overlap: expected a mapping with key FB (a factor in (0, 1], or a "
                            f"list of [forward stage, backward stage, factor]), got {raw!r}")
    fb = raw["FB"]

    def factor(x: Any, where: str) -> float:
        if not _is_number(x) or not 0 < x <= 1:
            raise InstanceError(f"{where}: expected a factor x in (0, 1] (an overlapped F&B "
                                f"lasts x times F + B), got {x!r}")
        return float(x)

    if not isinstance(fb, list):
        return factor(fb, "overlap.FB")
    pairs = []
    for i, row in enumerate(fb):
        if (not isinstance(row, (list, tuple)) or len(row) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in row[:2])):
            raise InstanceError(f"overlap.FB[{i}]: expected [forward stage, backward stage, "
                                f"factor], got {row!r}")
        a, b, x = row
        if not (0 <= a < stages and 0 <= b < stages) or a == b:
            raise InstanceError(f"overlap.FB[{i}]: stages must be two different stages in "
                                f"[0, {stages - 1}], got {a} and {b}")
        pairs.append((a, b, factor(x, f"overlap.FB[{i}][2]")))
    return tuple(pairs)


def _memory_in_one_unit(memory: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The instance's memory unit, and ``memory`` with every size converted to it.

    The unit is ``memory.unit`` when given (plain numbers are then in it), else the unit of the
    first value written with one (activation, then weight, then limit, then params). Values in
    other units
    are converted (``limit: 80GB`` with ``activation: 1.5GiB`` gives a limit of 74.5 GiB). A
    plain number next to sizes with units and no ``memory.unit`` is rejected: which unit it is
    in cannot be known.
    """
    declared = memory.get("unit")
    if declared is not None:
        if not isinstance(declared, str):
            raise InstanceError(f"memory.unit: expected a unit name such as GiB, got {declared!r}")
        try:
            check_unit(declared)
        except SizeError as exc:
            raise InstanceError(f"memory.unit: {exc}") from None
    sized: dict[str, tuple[float, str]] = {}  # field name -> (number, unit)
    plain: list[str] = []
    for key in _SIZED_KEYS:
        raw = memory.get(key)
        items = [(f"memory.{key}", raw)] if not isinstance(raw, (list, tuple)) else [
            (f"memory.{key}[{i}]", x) for i, x in enumerate(raw)]
        # per-segment lists (memory.activation[s][g]) are sizes too
        items = [pair for name, x in items for pair in (
            [(f"{name}[{g}]", y) for g, y in enumerate(x)] if isinstance(x, (list, tuple))
            else [(name, x)])]
        for name, item in items:
            if isinstance(item, str):
                try:
                    sized[name] = parse_size(item)
                except SizeError as exc:
                    raise InstanceError(f"{name}: {exc}") from None
            elif item is not None:
                plain.append(name)  # not a number at all: the per-stage parser says so
    if not sized:
        return declared, memory
    first, (_, first_unit) = next(iter(sized.items()))
    unit = declared or first_unit
    if declared is None and plain:
        raise InstanceError(
            f"{plain[0]}: a plain number, but {first} is written with a unit; write the unit on "
            f"every memory value or set memory.unit (e.g. unit: {first_unit}) to say what plain "
            "numbers are in")
    if "activation" not in memory:
        raise InstanceError(
            f"memory.activation: required when memory is written with units ({first} is); the "
            "default of 1 has no unit")

    def to_unit(raw: Any, name: str) -> Any:
        if isinstance(raw, (list, tuple)):
            return [to_unit(x, f"{name}[{i}]") for i, x in enumerate(raw)]
        return to_unit_item(raw, name)

    def to_unit_item(item: Any, name: str) -> Any:
        if name not in sized:
            return item
        number, item_unit = sized[name]
        return convert(number, item_unit, unit)

    converted = {k: (to_unit(v, f"memory.{k}") if k in _SIZED_KEYS else v)
                 for k, v in memory.items()}
    return unit, converted
