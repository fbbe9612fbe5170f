"""Shared pieces of the hand-made schedule generators."""

from __future__ import annotations

from zbsolve.instance import Instance
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
            len(stages) == 2 and stages[0] + stages[1] == 2 * p - 1,
            name,
            "needs the V placement (device r holds stages r and 2p-1-r); use placement: v",
        )
        pairs.append((stages[0], stages[1]))
    return pairs


def make(inst: Instance, name: str, orders: list[list[Op]]) -> Schedule:
    if name not in SEGMENTED_FAMILIES:
        whole_microbatches(inst, name)  # the families that do not check earlier
    return Schedule(orders=orders, name=name)
