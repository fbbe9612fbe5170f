"""Dual feasible functions (``zbsolve.solver.dual_feasible``): items that fit one bin never
weigh more than 1, whatever the floats; each function is nondecreasing and at most 1."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbsolve.solver.dual_feasible import EPS, family, identity, stair, stair_units, threshold


def test_the_functions_by_hand():
    f = threshold(0.25)
    assert (f(0.2), f(0.25 + 2 * EPS), f(0.75), f(0.8)) == (0.0, 0.25 + 2 * EPS, 0.75, 1.0)
    u1, u2 = stair(1), stair(2)
    assert (u1(0.4), u1(0.6), u1(1.0)) == (0.0, 1.0, 1.0)
    assert (u2(0.3), u2(0.34), u2(0.7)) == (0.0, 0.5, 1.0)
    assert u1(0.5) == 0.0  # exactly u^(1)(1/2) = 1/2; rounded down, the safe side
    shares = [0.8, 0.4]
    names = family(shares, stairs=2)
    assert identity in names and len(names) == 1 + 2 + 2  # thresholds below 0.4, above 0.2
    with pytest.raises(ValueError, match="lam must be in"):
        threshold(0.6)
    with pytest.raises(ValueError, match="k must be at least 1"):
        stair(0)


SPECIAL = [0.5, 1 / 3, 2 / 3, 0.25, 0.75, 0.2, 0.4, 0.6, 0.8, 0.5 - 1e-12, 1 / 3 + 1e-12]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.sampled_from(SPECIAL), st.floats(0, 1)), min_size=1, max_size=8),
       st.lists(st.floats(0, 1), max_size=4))
def test_items_that_fit_weigh_at_most_one(drawn, extra_shares):
    items: list[float] = []
    for x in drawn:  # the drawn items, in order, while they fit one bin
        if sum(items) + x <= 1:
            items.append(x)
    for phi in family(items + extra_shares):
        assert sum(phi(x) for x in items) <= 1 + 1e-9
        values = [phi(x) for x in sorted(items)]
        assert values == sorted(values) and all(0 <= v <= 1 for v in values)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.integers(1, 10), st.lists(st.integers(0, 40), max_size=10))
def test_whole_amounts_that_fit_weigh_at_most_the_capacity(cap, k, drawn):
    held: list[int] = []
    for a in drawn:  # the drawn amounts, in order, while they fit cap
        if sum(held) + a <= cap:
            held.append(a)
    assert sum(stair_units(a, cap, k) for a in held) <= k


def test_whole_amounts_by_hand():
    # cap 15 (1.5 in units of 0.1), k = 1: a unit of 10 weighs 1 (floor(20 / 15)); two halves
    # of 30 weigh 0 each under k = 1 (exactly 1 -> one less), 1 each under k = 2 (floor(45/30))
    assert (stair_units(10, 15, 1), stair_units(15, 30, 1), stair_units(15, 30, 2)) == (1, 0, 1)
    assert stair_units(30, 30, 3) == 3 and stair_units(0, 30, 3) == 0
