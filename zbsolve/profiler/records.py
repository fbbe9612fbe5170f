"""What one profile run measured, as plain data (no torch), for the writer and the reports."""

from __future__ import annotations

from dataclasses import dataclass

from zbsolve.profiler.timing import Spread


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
