"""Our hand-made families and torch's built-in schedule classes, without importing torch.

Two different facts are kept apart:

- **Placement** (``TORCH_CLASSES``): which stage runs on which rank for a torch schedule name.
  torchtitan places stages by the name (``_get_pp_rank_to_stage_indices_mapping``): V (rank r
  holds stages r and 2p-1-r) for ``ZBVZeroBubble`` and ``DualPipeV``, loop (stage s on rank
  s mod p) for every other name; single-stage classes need one stage per rank, looped ones two
  or more. A CSV loaded through torchtitan must therefore be named with a class of the same
  placement and stage count, even when the CSV's order is not that class's.
- **Same order** (``SAME_ORDER``): families whose generator produces exactly the compute order
  torch's class runs, checked by the tests with torch installed for p in 2..4 and several m
  (torch's own ``_step_microbatches`` driven by a recording stage for the single-stage classes,
  its ``pipeline_order`` for the looped ones). Only those may be called "the same schedule":
  when one of them ties the solver, torch's class already reaches the solver's step time and no
  CSV is needed.

Checked and *not* the same (so not claimed): torch's ``ScheduleZBVZeroBubble`` orders W
differently from our ``zb-v`` (simulated 0.1-0.4 % longer on the tested cases); torch's
``ScheduleLoopedBFS`` and ``ScheduleInterleavedZeroBubble`` have no family of ours.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TorchClass:
    cls: str  # class in torch.distributed.pipelining.schedules
    name: str  # the name get_schedule_class / torchtitan's pipeline_parallel_schedule take
    placement: str  # loop | v
    looped: bool  # PipelineScheduleMulti (>= 2 stages per rank) vs single (1 stage per rank)
    split_backward: bool  # runs I and W separately (else a fused backward)


TORCH_CLASSES: tuple[TorchClass, ...] = (
    TorchClass("ScheduleGPipe", "GPipe", "loop", False, False),
    TorchClass("Schedule1F1B", "1F1B", "loop", False, False),
    TorchClass("ScheduleInterleaved1F1B", "Interleaved1F1B", "loop", True, False),
    TorchClass("ScheduleLoopedBFS", "LoopedBFS", "loop", True, False),
    TorchClass("ScheduleInterleavedZeroBubble", "InterleavedZeroBubble", "loop", True, True),
    TorchClass("ScheduleZBVZeroBubble", "ZBVZeroBubble", "v", True, True),
    TorchClass("ScheduleDualPipeV", "DualPipeV", "v", True, True),
)
BY_CLASS = {c.cls: c for c in TORCH_CLASSES}

SAME_ORDER: dict[str, str] = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "1f1b-interleaved": "ScheduleInterleaved1F1B",
    "dualpipev": "ScheduleDualPipeV",
}
"""family -> torch class running exactly the family's order (checked by tests with torch)."""


class NoTorchName(ValueError):
    """The layout has no torch schedule name that places stages the same way."""


def placement_kind(placement: tuple[int, ...], devices: int, chunks: int) -> str | None:
    """``loop`` or ``v`` when a placement is one of those two, else None (explicit)."""
    S = devices * chunks
    if tuple(placement) == tuple(s % devices for s in range(S)):
        return "loop"
    if chunks == 2 and tuple(placement) == tuple(
            s if s < devices else 2 * devices - 1 - s for s in range(S)):
        return "v"
    return None


def runtime_name(placement: tuple[int, ...], devices: int, chunks: int,
                 split_backward: bool = True) -> TorchClass:
    """The torch schedule class to name for a CSV of this layout (placement must match).

    Loop with one chunk: ``1F1B`` (any single-stage name places alike); loop with more:
    ``InterleavedZeroBubble`` when the schedule splits the backward, else ``Interleaved1F1B``;
    V with two chunks: ``ZBVZeroBubble``.
    """
    kind = placement_kind(placement, devices, chunks)
    if kind is None:
        raise NoTorchName(
            f"placement {list(placement)}: torch's schedules (and torchtitan) place stages in a "
            "loop (stage s on rank s mod p) or, with 2 chunks, in a V; an explicit placement "
            "cannot be loaded there: solve with placement loop or v")
    if kind == "v":
        return BY_CLASS["ScheduleZBVZeroBubble"]
    if chunks == 1:
        return BY_CLASS["Schedule1F1B"]
    return BY_CLASS["ScheduleInterleavedZeroBubble" if split_backward else
                    "ScheduleInterleaved1F1B"]


@dataclass(frozen=True)
class BuiltinMatch:
    family: str
    torch_class: str
    makespan: float


def builtin_reaching(inst, makespan: float, rel_tol: float = 1e-9) -> BuiltinMatch | None:
    """A torch built-in schedule (same order as one of our families) whose simulated makespan
    on ``inst`` is within ``rel_tol`` of ``makespan`` or below, and fits the memory limit.

    When one exists, torch's class already reaches that step time: no CSV needed.
    """
    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate

    best: BuiltinMatch | None = None
    kind = placement_kind(inst.placement, inst.p, inst.v)
    for family, cls in SAME_ORDER.items():
        tc = BY_CLASS[cls]
        if tc.placement != kind or tc.looped != (inst.v > 1):
            continue
        try:
            sched = generate(family, inst)
        except ValueError:
            continue
        sim = simulate(inst, sched)
        if not sim.feasible:
            continue
        if sim.makespan <= makespan * (1 + rel_tol) and (best is None or
                                                        sim.makespan < best.makespan):
            best = BuiltinMatch(family, cls, sim.makespan)
    return best
