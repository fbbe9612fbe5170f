"""``claims.py`` on draws whose model gets the staircase cumulative (issue 18,
``model._add_dual_feasible_memory``: where a device's staircase memory-time is the instance's
analytic bound, for the draw's objective).

Usage: python results/audit/claims_stairs.py SEED COUNT [SOLVE_SECONDS [MAX_OPS]] > OUT.jsonl

Draws (``draws.instance``) without such a device are drawn again (about 1 in 50 has one), so
every line checks the model with the constraint against the blind oracle. The objective is
drawn by ``claims.py`` after the filter, which tests both objectives' models.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import draws  # noqa: E402

from zbsolve.solver import model  # noqa: E402

_instance = draws.instance


def _binds(inst) -> bool:
    """Whether the model of either objective gets the staircase cumulative on some device."""
    for objective in ("makespan", "span"):
        b = model._Builder(inst, scale_=model.TimeScale.choose(inst), objective=objective,
                           symmetry=True)
        if any(b._binding_stair(d) is not None for d in range(inst.devices)):
            return True
    return False


def _with_stairs(rng, max_ops: int = draws.SMALL_OPS):
    while True:
        inst = _instance(rng, max_ops)
        if not inst.offers_modes and _binds(inst):
            return inst


if __name__ == "__main__":
    draws.instance = _with_stairs
    sys.argv = [str(HERE / "claims.py"), *sys.argv[1:]]
    runpy.run_path(str(HERE / "claims.py"), run_name="__main__")
