"""Behaviour tests that kill ``solver/bounds.py``'s mutants (results/mutation/README.md, part 3):
bound values pinned on small instances, each worked out by hand in a comment."""

from __future__ import annotations

from conftest import make_instance

from zbsolve.solver.bounds import critical_path


def test_critical_path_is_the_longest_chain_with_its_delays():
    # p=2, m=1, all ops 1, comm 0.5: F0 -0.5-> F1 -> I1 -0.5-> I0 -> W0: 1+0.5+1+1+0.5+1+1 = 6
    assert critical_path(make_instance(p=2, m=1, comm=0.5)) == 6.0
