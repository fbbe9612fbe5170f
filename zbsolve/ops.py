"""The op: the one atom every layer of zbsolve talks about.

An op is (kind, logical stage, microbatch). Its compact string form is the one PyTorch's
pipelining CSV uses (``3F12`` = stage 3, forward, microbatch 12), so a schedule can be read
and written by people and by torch without a translation table.
"""

from __future__ import annotations

import re
from typing import NamedTuple

KINDS = ("F", "I", "W", "B")
"""Forward, backward for inputs (the papers' B), backward for weights, and the fused full
backward B = I then W as one op, which hands its input gradient on only when it ends (as a
runtime without the I/W split does)."""

_OP_RE = re.compile(r"^(\d+)([FIWB])(\d+)$")


class Op(NamedTuple):
    # A NamedTuple rather than a dataclass: the simulator hashes tens of thousands of these.
    kind: str
    stage: int
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.mb}"


def F(stage: int, mb: int) -> Op:
    return Op("F", stage, mb)


def I(stage: int, mb: int) -> Op:  # noqa: E743 - the papers' name for the input backward
    return Op("I", stage, mb)


def W(stage: int, mb: int) -> Op:
    return Op("W", stage, mb)


def B(stage: int, mb: int) -> Op:
    return Op("B", stage, mb)


def parse_op(token: str) -> Op:
    """Parse one strict token such as ``3F12``.

    Strict on purpose: torch's own CSV parser matches a prefix, so ``3F12x`` would silently
    become ``3F12`` there; here it is an error.
    """
    match = _OP_RE.match(token.strip())
    if match is None:
        raise ValueError(
            f"bad op token {token!r}: expected <stage><F|I|W|B><microbatch>, e.g. '3F12'"
        )
    return Op(match[2], int(match[1]), int(match[3]))
