"""Shared pieces of the hand-made schedule generators."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from zbsolve.instance import Instance, v_players
from zbsolve.ops import Op
from zbsolve.schedule import Schedule


class NotApplicable(ValueError):
    """This hand-made schedule does not apply to the instance; the message says why."""


def require(cond: bool, name: str, why: str) -> None:
    if not cond:
        raise NotApplicable(f"{name}: {why}")


SEGMENTED_FAMILIES = ("seq1f1b", "seq1f1b-zb")
"""The families that schedule sequence segments (``segments`` > 1); the others refuse them."""


def whole_microbatches(inst: Instance, name: str) -> None:
    require(inst.segments == 1, name, f"schedules whole microbatches, the instance splits each "
            f"into {inst.segments} sequence segments; segmented families: "
            + ", ".join(SEGMENTED_FAMILIES))


def one_replica(inst: Instance, name: str) -> None:
    require(inst.replicas == 1, name, "needs one model replica (replicas: 1); two-replica "
            "families: chimera, dualpipe")
    if name not in SEGMENTED_FAMILIES:
        whole_microbatches(inst, name)


def single_chunk_stages(inst: Instance, name: str) -> list[int]:
    """For v=1 families: the pipeline position of each device's (only) stage."""
    one_replica(inst, name)
    require(inst.chunks == 1, name, f"needs chunks = 1 (one stage per device), got {inst.chunks}")
    return [inst.stages_of(d)[0] for d in range(inst.devices)]


def v_shape_stages(inst: Instance, name: str) -> list[tuple[int, int]]:
    """For V families: (chunk-0 stage, chunk-1 stage) per device, checking the V placement."""
    p = inst.devices
    one_replica(inst, name)
    require(inst.chunks == 2, name, f"needs chunks = 2 (V placement), got {inst.chunks}")
    pairs = []
    for d in range(p):
        stages = sorted(inst.stages_of(d))
        require(
            stages == [d, 2 * p - 1 - d],
            name,
            "needs the V placement (device r holds stages r and 2p-1-r); use placement: v",
        )
        pairs.append((stages[0], stages[1]))
    return pairs


def renumbered_v(generate: Callable[[Instance], Schedule]) -> Callable[[Instance], Schedule]:
    """A V family that also runs on a V whose devices are numbered otherwise.

    The V families are written for device r holding stages r and 2p-1-r. An explicit
    placement where some other device holds both (say [1, 0, 0, 1]) is the same pipeline
    under another numbering of the devices: only the per-device limits follow the devices.
    So the family runs on the V numbering, and each device gets the row of the V device it
    plays. Without this the families read such a placement as theirs and crashed or wrote
    rows for the wrong devices.
    """
    @functools.wraps(generate)
    def run(inst: Instance) -> Schedule:
        played = v_players(inst)
        if played is None or played == tuple(range(inst.devices)):
            return generate(inst)  # no V, or the V numbering already: the family decides
        limited = any(x is not None for x in inst.limit)
        limit = [inst.limit[d] for d in played] if limited else None
        sched = generate(inst.with_(placement="v", limit=limit))
        orders: list[list] = [[] for _ in played]
        for r, d in enumerate(played):
            orders[d] = sched.orders[r]
        return dataclasses.replace(sched, orders=orders)
    return run


def make(inst: Instance, name: str, orders: list[list[Op]]) -> Schedule:
    if name not in SEGMENTED_FAMILIES:
        whole_microbatches(inst, name)  # the families that do not check earlier
    return Schedule(orders=orders, name=name)
