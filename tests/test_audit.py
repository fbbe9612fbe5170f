"""A few draws of the audits (``results/audit/``) in every run, on random instances that combine
the features: the solver's claims against the blind oracle, and every family and export.

The audits' own runs cover hundreds of draws (``results/audit/README.md``); these keep the
combinations they found broken from breaking again unnoticed. Fixed draws, one CP-SAT worker,
seed 0 and time limits (a draw whose oracle does not prove is skipped by the audit itself).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results" / "audit"))

import claims  # noqa: E402
import claims_stairs  # noqa: E402
import draws  # noqa: E402
import exports  # noqa: E402

SEED = 4


def _draw(seed: int, k: int, max_ops: int = draws.SMALL_OPS) -> tuple:
    rng = random.Random(seed * 100003 + k)
    return draws.instance(rng, max_ops), rng


# [1, 99]: offload on two copy streams, where the rows once broke the limit in the simulator
@pytest.mark.parametrize("seed, k", [(1, 99)] + [(SEED, k) for k in range(7)])
def test_the_solvers_claims_hold_on_feature_combinations(seed, k):
    one, _ = claims.options(["3"])
    inst, rng = _draw(seed, k)
    row = one(inst, rng)
    assert row["bad"] == [], row


# draws whose model gets the staircase cumulative (about 1 in 50 of the others), seed 44
@pytest.mark.parametrize("k", range(2))
def test_the_solvers_claims_hold_where_the_model_states_the_staircase(k):
    one, _ = claims.options(["3"])
    rng = random.Random(44 * 100003 + k)
    inst = claims_stairs._with_stairs(rng)
    row = one(inst, rng)
    assert row["bad"] == [], row


# [3, 14]: a V with overlapped pairs, whose torchtitan export once raised AttributeError
@pytest.mark.parametrize("seed, k, max_ops", [(3, 14, 120)] + [(SEED, k, 40) for k in range(3)])
def test_every_family_and_export_writes_or_refuses_with_its_reason(seed, k, max_ops):
    one, _ = exports.options([])
    inst, rng = _draw(seed, k, max_ops)
    row = one(inst, rng)
    assert row["bad"] == [], row
    assert row["counts"]["exported"] >= 1  # solve() always gives a schedule within the limit
