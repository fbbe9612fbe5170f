"""GPipe and 1F1B: the one-chunk schedules every other family is measured against."""

from __future__ import annotations

from zbsolve.baselines.common import make, single_chunk_stages
from zbsolve.instance import Instance
from zbsolve.ops import B, F, Op
from zbsolve.schedule import Schedule


def gpipe(inst: Instance) -> Schedule:
    """All forwards, then all full backwards: peak memory m activations on every device."""
    m = inst.microbatches
    orders = []
    for s in single_chunk_stages(inst, "gpipe"):
        order: list[Op] = [F(s, j) for j in range(m)]
        for j in range(m):
            order.append(B(s, j))
        orders.append(order)
    return make(inst, "gpipe", orders)


def one_f_one_b(inst: Instance) -> Schedule:
    """Warm up with S-s-1 forwards, then alternate one forward and one full backward."""
    m, S = inst.microbatches, inst.stages
    orders = []
    for s in single_chunk_stages(inst, "1f1b"):
        warm = min(S - s - 1, m)
        order: list[Op] = [F(s, j) for j in range(warm)]
        for j in range(m - warm):
            order.append(F(s, warm + j))
            order.append(B(s, j))
        for j in range(m - warm, m):
            order.append(B(s, j))
        orders.append(order)
    return make(inst, "1f1b", orders)
