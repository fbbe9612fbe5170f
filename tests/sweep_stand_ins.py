"""Solve functions for the sweep's interrupt tests, importable by the sweep's worker processes.

``slow_except_smallest``: the smallest limit of a run answers at once (serial order); every other
case records its worker's pid in ``$ZBSOLVE_TEST_MARKS`` and then takes a minute, so a test can
interrupt the sweep while those cases run, knowing which one finished.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from zbsolve.ops import Op
from zbsolve.schedule import Schedule
from zbsolve.sweep.runner import CaseOutcome

SMALLEST = 3.0  # the limit (absolute) answered at once


def serial(inst) -> Schedule:
    orders: list[list[Op]] = [[] for _ in range(inst.devices)]
    for mb in range(inst.microbatches):
        for s in range(inst.stages):
            orders[inst.placement[s]].append(Op("F", s, mb))
        for s in reversed(range(inst.stages)):
            orders[inst.placement[s]] += [Op("I", s, mb), Op("W", s, mb)]
    return Schedule(orders, name="serial")


def slow_except_smallest(inst, params, hints) -> CaseOutcome:
    if inst.limit[0] > SMALLEST:
        marks = Path(os.environ["ZBSOLVE_TEST_MARKS"])
        (marks / f"running-{os.getpid()}").write_text(str(inst.limit[0]))
        time.sleep(60)
    return CaseOutcome(serial(inst), "feasible")
