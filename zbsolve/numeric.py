"""The one set of tolerances: when two figures count as equal, and when memory fits a limit.

Memory comparisons are *relative*: an instance may count memory in bytes (1e10) or in
activations (a few units) or in GiB of tiny models (1e-6), and one absolute epsilon misjudges
at least one of those. Times keep an absolute epsilon on top of a relative one because
instances written by people use a few decimals of milliseconds or unit slots.
"""

from __future__ import annotations

REL_TOL = 1e-9
TIME_EPS = 1e-9


def exceeds(value: float, limit: float | None) -> bool:
    """True when ``value`` is above ``limit`` by more than rounding (None = no limit)."""
    if limit is None:
        return False
    return value - limit > REL_TOL * max(abs(limit), abs(value))


def fits(value: float, limit: float | None) -> bool:
    return not exceeds(value, limit)


def time_le(a: float, b: float) -> bool:
    """a <= b up to rounding of either."""
    return a <= b + TIME_EPS + REL_TOL * max(abs(a), abs(b))
