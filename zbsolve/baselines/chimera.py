"""Chimera (Li and Hoefler, SC'21): two 1F1B pipelines in opposite directions, merged.

Replica 0 (the "down" pipeline) runs model stage s on device s, replica 1 (the "up" pipeline)
on device p-1-s; each gets half of the microbatches. In unit slots (a forward and a full
backward one slot each) a pipeline's 1F1B puts microbatch j's forward on stage k at slot
k + 2j and its backward at slot 2D - 1 - k + 2j (D = p stages): once the pipeline is full a
stage alternates F and B, one microbatch every two slots. Merging the two pipelines slot by
slot is conflict-free for even D: on device d the down pipeline's forwards have the parity of
d and its backwards the other, the up pipeline the reverse, and the only same-parity pairs
(down B with up F, up B with down F) would need a microbatch index of D/2 or more, past the
D/2 that one *basic unit* holds. A unit (D microbatches, D/2 per direction) ends at slot
3D - 2; further units start 2D slots later each, which the same parity argument keeps
conflict-free, so N = kD microbatches end at 2N + D - 2 slots and the bubble is
(D - 2) / (2N + D - 2), against (D - 1) / (N + D - 1) for 1F1B (tests check both exactly).
A last, smaller unit takes the remaining microbatches.

The slot order is the schedule; the simulator times it with the instance's real durations.
"""

from __future__ import annotations

from zbsolve.baselines.common import make, require
from zbsolve.instance import Instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule


def slot_order(D: int, n: int) -> list[tuple[int, str, int, int]]:
    """One unit: (slot, kind, position k in the pipeline, local microbatch j) for n <= D/2."""
    out = []
    for j in range(n):
        for k in range(D):
            out.append((k + 2 * j, "F", k, j))
            out.append((2 * D - 1 - k + 2 * j, "B", k, j))
    return out


def chimera(inst: Instance) -> Schedule:
    """Chimera's merged bidirectional 1F1B (fused backwards), units of D microbatches."""
    p, m = inst.devices, inst.microbatches
    require(inst.replicas == 2, "chimera", "needs two model replicas (replicas: 2)")
    require(inst.chunks == 1, "chimera", f"needs chunks = 1 per replica, got {inst.chunks}")
    require(p % 2 == 0, "chimera", f"needs an even number of stages (devices), got {p}")
    S = inst.model_stages
    require(list(inst.placement[:S]) == list(range(p)), "chimera",
            "needs replica 0 on the loop placement (stage s on device s); use placement: loop")
    rows: list[list[tuple[int, Op]]] = [[] for _ in range(p)]
    base, unit = 0, 0
    while base < m:
        n = min(p, m - base) // 2  # microbatches per direction in this unit
        for slot, kind, k, j in slot_order(p, n):
            for r in (0, 1):
                stage = r * S + k
                rows[inst.placement[stage]].append((2 * p * unit + slot,
                                                    Op(kind, stage, base + 2 * j + r)))
        base += 2 * n
        unit += 1
    orders = []
    for row in rows:
        row.sort(key=lambda x: x[0])
        slots = [t for t, _ in row]
        if len(slots) != len(set(slots)):  # cannot happen for even p (module docstring)
            raise AssertionError("chimera: two ops in one slot")
        orders.append([op for _, op in row])
    return make(inst, "chimera", orders)
