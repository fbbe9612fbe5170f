"""Dual feasible functions (``zbsolve.solver.dual_feasible``): items that fit one bin never
weigh more than 1, whatever the floats; each function is nondecreasing and at most 1."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbsolve.solver.dual_feasible import EPS, family, identity, stair, threshold


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
