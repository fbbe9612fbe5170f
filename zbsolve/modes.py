"""Memory modes: what a unit does with its activation between its forward and its backward.

A unit (stage, microbatch, segment) runs in one mode, a *form* of the unit as fused vs split
backward is (``zbsolve.graph`` derives its ops, dependencies and memory from it):

- ``keep``: the activation stays on the device from F's start to the backward (zbsolve's
  default, and the only mode of an instance without ``recompute`` / ``offload``);
- ``recompute``: F frees all but ``kept`` (its checkpoint, the stage input) when it ends; an op
  R of duration ``R`` on the device's compute stream, after F and before I (or B), re-allocates
  the rest at its start (Megatron's full recompute, placed by the scheduler like any job);
- ``selective``: the same with ``R_selective`` / ``kept_selective`` (e.g. attention only); its
  op is RS;
- ``offload``: after F, a copy O (device to host, ``d2h``) on the device's copy stream frees
  ``fraction`` of the activation when it ends; a copy L (host to device, ``h2d``) that ends
  before I (or B) re-allocates it at its start.

The instance offers a mode with its fields (absent = not offered):

    recompute: {R: 18.5, kept: 0.05, R_selective: 6.0, kept_selective: 0.3}
    offload: {fraction: 1.0, d2h: 6.0, h2d: 6.0, streams: 1}

Copy streams: with ``streams: 1`` a device's copies (both directions) never overlap each other;
with ``streams: 2`` copies out (O) and copies in (L) each have their own stream (one copy
engine per direction, as CUDA devices have), so an O may overlap an L.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    KEEP = "keep"
    RECOMPUTE = "recompute"
    SELECTIVE = "selective"
    OFFLOAD = "offload"


MODES = tuple(m.value for m in Mode)
MODE_OPS: dict[str, tuple[str, ...]] = {
    "keep": (),
    "recompute": ("R",),
    "selective": ("RS",),
    "offload": ("O", "L"),
}
"""The op kinds each mode adds to a unit (in dependency order)."""

KIND_MODE = {kind: mode for mode, kinds in MODE_OPS.items() for kind in kinds}
"""The mode an op kind belongs to: R -> recompute, RS -> selective, O and L -> offload."""

MODE_KINDS = tuple(KIND_MODE)
COPY_KINDS = ("O", "L")  # run on a device's copy stream
RECOMPUTE_KINDS = ("R", "RS")  # run on its compute stream


@dataclass(frozen=True)
class Recompute:
    """Per stage (all graph stages): the recompute time and what a recomputed F keeps."""

    R: tuple[float, ...]
    kept: tuple[float, ...]
    R_selective: tuple[float, ...] | None = None
    kept_selective: tuple[float, ...] | None = None

    @property
    def selective(self) -> bool:
        return self.R_selective is not None

    def to_dict(self, compact) -> dict:
        out = {"R": compact(self.R), "kept": compact(self.kept)}
        if self.selective:
            out["R_selective"] = compact(self.R_selective)
            out["kept_selective"] = compact(self.kept_selective)
        return out


@dataclass(frozen=True)
class Offload:
    """Per stage: the share of the activation moved to host and the copy times; copy streams
    per device (1: all copies in one stream; 2: one per direction)."""

    fraction: tuple[float, ...]
    d2h: tuple[float, ...]
    h2d: tuple[float, ...]
    streams: int = 1

    def to_dict(self, compact) -> dict:
        return {"fraction": compact(self.fraction), "d2h": compact(self.d2h),
                "h2d": compact(self.h2d), "streams": self.streams}


def parse_modes(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated list of modes (``keep,recompute,offload``), checked; None stays None."""
    if text is None:
        return None
    out = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in out if t not in MODES]
    if bad or not out:
        raise ValueError(f"modes: expected a comma-separated list of {', '.join(MODES)}, "
                         f"got {text!r}")
    return out
