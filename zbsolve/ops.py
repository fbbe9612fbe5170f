"""The op: the one atom every layer of zbsolve talks about.

An op is (kind, stage, microbatch, segment). Its compact string form is the one PyTorch's
pipelining CSV uses (``3F12`` = stage 3, forward, microbatch 12), so a schedule can be read
and written by people and by torch without a translation table; a segment other than 0 adds
``.g`` (``3F12.2``), a form only our extended CSV and our files use.

``stage`` is a stage of the task graph: with two model replicas (Chimera, DualPipe) replica
r's model stage s is stage r·S + s, as in the extended torch CSV. Ops that belong to the whole
step rather than a microbatch (the replicas' gradient all-reduce) carry ``mb = -1`` and print
without one (``3SYNC``).

Two ops of one device may also run as one overlapped job (DualPipe's F&B, torch's
``OVERLAP_F_B``): a ``Pair``, written ``(0F7;7B3)`` as torch writes it.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple


class Kind(StrEnum):
    """What an op does. A ``str`` enum: ``Kind.F == "F"``, so tokens and tables stay plain text."""

    F = "F"  # forward
    I = "I"  # noqa: E741 - backward for inputs (the papers' B)
    W = "W"  # backward for weights
    B = "B"  # fused full backward: I then W as one op, its input gradient leaves when it ends
    SYNC = "SYNC"  # all-reduce of one model stage's weight gradients between its replicas
    # The step boundary (zbsolve.step; the jobs and their rules are zbsolve.graph's):
    AR = "AR"  # data-parallel gradient reduction of one model stage
    CHECK = "CHECK"  # the global norm/NaN reduction every stage waits for (step mode sync)
    NORM = "NORM"  # partial norm/NaN state of a stage and those after it (post-validation)
    OPT = "OPT"  # the optimizer step of one stage, on the stage's device


MICROBATCH_KINDS = (Kind.F, Kind.I, Kind.W, Kind.B)
KINDS = tuple(k.value for k in MICROBATCH_KINDS)
"""The kinds a device runs per microbatch (what schedules list in their orders)."""

BACKWARD_KINDS = (Kind.I, Kind.B)  # the ops that produce a stage's input gradient

_OP_RE = re.compile(r"(\d+)([FIWB])(\d+)(?:\.(\d+))?")
_STEP_RE = re.compile(r"(\d+)(SYNC|AR|NORM|OPT)")
STEP_BOUNDARY_KINDS = frozenset(k.value for k in (Kind.AR, Kind.CHECK, Kind.NORM, Kind.OPT))
"""The step boundary's kinds (``zbsolve.step``)."""
_PAIR_RE = re.compile(r"\(([^();]+);([^();]+)\)")


class Op(NamedTuple):
    # A NamedTuple rather than a dataclass: the simulator hashes tens of thousands of these.
    kind: str
    stage: int
    mb: int
    seg: int = 0

    def __str__(self) -> str:
        if self.mb < 0:
            return f"{self.stage}{self.kind}" if self.stage >= 0 else self.kind
        return f"{self.stage}{self.kind}{self.mb}" + (f".{self.seg}" if self.seg else "")

    @property
    def unit(self) -> tuple[int, int, int]:
        """(stage, microbatch, segment): the piece of work whose F, I, W (or B) this op is."""
        return (self.stage, self.mb, self.seg)


class Pair(NamedTuple):
    """Two ops of one device run as one overlapped job (a forward and a backward of different
    microbatches). Both start when the job starts and end when it ends."""

    first: Op
    second: Op

    def __str__(self) -> str:
        return f"({self.first};{self.second})"


Entry = Op | Pair
"""One item of a device's order: a job."""


def ops_of(entry: Entry) -> tuple[Op, ...]:
    """The ops of one order entry (one for an op, two for a pair)."""
    return tuple(entry) if isinstance(entry, Pair) else (entry,)


def F(stage: int, mb: int, seg: int = 0) -> Op:
    return Op("F", stage, mb, seg)


def I(stage: int, mb: int, seg: int = 0) -> Op:  # noqa: E743 - the papers' name for the input backward
    return Op("I", stage, mb, seg)


def W(stage: int, mb: int, seg: int = 0) -> Op:
    return Op("W", stage, mb, seg)


def B(stage: int, mb: int, seg: int = 0) -> Op:
    return Op("B", stage, mb, seg)


def parse_op(token: str) -> Op:
    """Parse one strict token such as ``3F12`` (or ``3F12.2`` with a segment, ``3SYNC``).

    Strict on purpose: torch's own CSV parser matches a prefix, so ``3F12x`` would silently
    become ``3F12`` there; here it is an error.
    """
    text = token.strip() if isinstance(token, str) else token
    if not isinstance(text, str):
        raise ValueError(f"bad op token {token!r}: expected a string such as '3F12'")
    if match := _OP_RE.fullmatch(text):
        return Op(match[2], int(match[1]), int(match[3]), int(match[4] or 0))
    if match := _STEP_RE.fullmatch(text):
        return Op(match[2], int(match[1]), -1)
    if text == Kind.CHECK:
        return Op(Kind.CHECK.value, -1, -1)
    raise ValueError(
        f"bad op token {token!r}: expected <stage><F|I|W|B><microbatch>[.<segment>], e.g. '3F12'"
    )


def parse_entry(token: str) -> Entry:
    """An op token, or an overlapped pair ``(0F7;7B3)``."""
    text = token.strip() if isinstance(token, str) else token
    if isinstance(text, str) and (match := _PAIR_RE.fullmatch(text)):
        return Pair(parse_op(match[1]), parse_op(match[2]))
    return parse_op(token)
