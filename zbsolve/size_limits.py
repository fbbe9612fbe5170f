"""The sizes zbsolve accepts, in one place: every input is checked against them before any
work starts, and a refusal names the count and the limit (docs/failure-semantics.md lists them).

Why limits at all: an instance's size multiplies into the work of every layer (ops = 3·S·m),
and a typo such as ``microbatches: 1000000000`` would otherwise take gigabytes and hours before
anything said no. The limits sit well above the largest cases zbsolve is benchmarked on
(p = 64, m = 512, v = 2: 196,608 ops) and below what a 24 GiB machine can hold.
"""

from __future__ import annotations

MAX_DEVICES = 1024
"""Pipeline ranks p of an instance or a table."""
MAX_CHUNKS = 64
"""Model chunks per device v."""
MAX_STAGES = 4096
"""Logical stages S = p·v."""
MAX_MICROBATCHES = 65536
"""Microbatches m per step."""
MAX_OPS = 1_000_000
"""Compute ops 3·S·m of an instance, and ops of a schedule or table file."""
MAX_SHOW_OPS = 60_000
"""Ops ``zbsolve show`` draws: drawing is linear in them (p = 32, m = 256, v = 2, 49,152 ops,
takes ~15 s on 2 cores); far above it a picture is unreadable anyway."""
MAX_INPUT_BYTES = 512 * 2**20
"""Size of any input file (instance, schedule, table, CSV)."""
MAX_SWEEP_LIMITS = 1000
"""Memory limits one ``zbsolve sweep`` lists (``--limits`` range or comma list)."""
MAX_SWEEP_CASES = 5000
"""(layout, limit) cases of one sweep."""
MAX_SEED = 2**31 - 1
"""CP-SAT's random seed is a 32-bit signed integer."""
MIN_POSITIVE = 1e-9
"""Smallest positive time or memory size an instance may hold, relative to its largest one: the
solver scales times to integers and the simulator compares sums, so values 1e-300 apart from
each other cannot be told apart (all values are relative: pick the unit accordingly)."""
MAX_VALUE = 1e15
"""Largest time or memory size an instance may hold (in its own unit); sums of 1e6 such values
stay far from float overflow and exact to ~1e-7 relative."""
MIN_VALUE = 1e-12
"""Smallest positive time or memory size (absolute) an instance may hold."""


class SizeLimitError(ValueError):
    """An input above one of the stated size limits; the message says the count and the limit."""


def check_size(what: str, count: int | float, limit: int | float, fix: str = "") -> None:
    """Raise SizeLimitError if ``count`` exceeds ``limit``."""
    if count > limit:
        tail = f"; {fix}" if fix else ""
        raise SizeLimitError(f"{what}: {count:,} is over the limit of {limit:,}{tail}")
