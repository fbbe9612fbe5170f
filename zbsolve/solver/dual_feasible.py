"""Dual feasible functions: weights that items fitting one bin never sum above 1.

A nondecreasing phi on [0, 1] is *dual feasible* when x_1 + ... + x_n <= 1 implies
phi(x_1) + ... + phi(x_n) <= 1 (Fekete and Schepers, 2001). ``bounds.memory_energy_bounds``
reads a device's memory as such a bin: at every instant the units it holds fit its room, so
their phi(share) sum to at most 1, and integrating over the span gives span >= the sum over
units of phi(share) x how long the unit must hold it. phi(x) = x is the plain memory-time
bound; the others count a unit that leaves room for no other like a whole bin (one microbatch
in flight under 1.25 x its activation: the span is at least the sum of the round trips, where
memory-time gives 1 / 1.25 of that).

Floats: each function returns a value no larger than its exact one wherever an argument sits
within ``EPS`` of a threshold (a smaller phi keeps the property).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

EPS = 1e-9
STAIRS = 10  # the staircases tried: u^(1) .. u^(STAIRS)
Phi = Callable[[float], float]


def identity(x: float) -> float:
    return x


def threshold(lam: float) -> Phi:
    """f_0 of Fekete and Schepers (0 < lam <= 1/2): 0 below lam, 1 above 1 - lam, x between.
    An item above 1 - lam leaves less than lam, so every other item is below lam (weight 0)."""
    if not 0 < lam <= 0.5:
        raise ValueError(f"threshold: lam must be in (0, 1/2], got {lam}")

    def phi(x: float) -> float:
        if x > 1 - lam + EPS:
            return 1.0
        return 0.0 if x < lam + EPS else x
    return phi


def stair(k: int) -> Phi:
    """u^(k) of Fekete and Schepers (k >= 1): floor((k + 1) x) / k, and x where (k + 1) x is
    a whole number (here: the floor taken just below it, which is smaller)."""
    if k < 1:
        raise ValueError(f"stair: k must be at least 1, got {k}")

    def phi(x: float) -> float:
        return min(1.0, max(0, math.floor((k + 1) * x - EPS)) / k)
    return phi


def stair_units(held: int, cap: int, k: int) -> int:
    """k u^(k)(held / cap) in whole numbers, for a cumulative of capacity k over integer
    amounts under ``cap``: floor((k + 1) held / cap), one less where that division is exact
    (u^(k) is held / cap there, and (n - 1) / k <= n / (k + 1)). Amounts that fit ``cap``
    never sum above k."""
    n, rest = divmod((k + 1) * held, cap)
    return max(0, min(k, n - 1 if rest == 0 else n))


def family(shares: Iterable[float], stairs: int = STAIRS) -> list[Phi]:
    """The functions worth trying on items of these ``shares``: the identity, every threshold
    just below a share (it counts at its size) or just above a share's complement (it counts
    as 1), the only places f_0 changes which items count, and ``stairs`` staircases."""
    lams = sorted({v for x in shares for v in (x - 2 * EPS, 1 - x + 2 * EPS)
                   if EPS < v <= 0.5})
    return [identity, *(threshold(lam) for lam in lams),
            *(stair(k) for k in range(1, stairs + 1))]
