"""``claims.py`` on two-replica draws only (issue 18: the memory edges per replica).

Usage: python results/audit/claims_replicas.py SEED COUNT [SOLVE_SECONDS [MAX_OPS]] > OUT.jsonl

The draws of ``draws.py`` with one replica are drawn again; everything else is ``claims.py``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import draws  # noqa: E402

_draw = draws.draw


def _two_replicas(rng, larger: bool) -> dict:
    while True:
        data = _draw(rng, larger)
        if data["replicas"] == 2:
            return data


if __name__ == "__main__":
    draws.draw = _two_replicas
    sys.argv = [str(HERE / "claims.py"), *sys.argv[1:]]
    runpy.run_path(str(HERE / "claims.py"), run_name="__main__")
