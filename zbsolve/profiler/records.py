"""What one profile run measured, as plain data (no torch), for the writer and the reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from zbsolve.profiler.timing import Spread


@dataclass
class ModeSamples:
    """One stage's mode samples so far."""

    R: list[float] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)
    d2h: list[float] = field(default_factory=list)
    h2d: list[float] = field(default_factory=list)
    moved: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ModeProfile:
    """Measured memory-mode figures of one stage (times in ms, memory in bytes); None: not
    measured."""

    R: Spread | None
    kept_bytes: float | None
    d2h: Spread | None = None
    h2d: Spread | None = None
    moved_bytes: float | None = None

    @staticmethod
    def of(s: ModeSamples) -> ModeProfile:
        def spread(xs: list[float]) -> Spread | None:
            return Spread.of(xs) if xs else None

        return ModeProfile(spread(s.R), Spread.of(s.kept).median if s.kept else None,
                           spread(s.d2h), spread(s.h2d),
                           Spread.of(s.moved).median if s.moved else None)


@dataclass(frozen=True)
class StageProfile:
    """Measured figures of one logical stage, per microbatch (times in ms, memory in bytes)."""

    stage: int
    layers: int
    first: bool
    last: bool
    F: Spread
    I: Spread  # noqa: E741 - the papers' name
    W: Spread
    saved_bytes: float  # kept by F for the backward (median over samples)
    held_bytes: float  # kept from I's end until W's end (the deferred weight-gradient store)
    param_bytes: int
    memory_method: str
    modes: ModeProfile | None = None  # when the memory modes were measured (--modes)


@dataclass(frozen=True)
class SegmentProfile:
    """Measured figures of one stage's segments (times in ms, memory in bytes, per segment)."""

    stage: int
    lengths: tuple[int, ...]
    F: tuple[Spread, ...]
    I: tuple[Spread, ...]  # noqa: E741 - the papers' name
    W: tuple[Spread, ...]
    saved_bytes: tuple[float, ...]  # kept by each segment's F for its backward
    held_bytes: tuple[float, ...]  # kept from its I's end until its W's end
    kv_bytes: tuple[float, ...]  # its own keys and values (part of saved_bytes)
