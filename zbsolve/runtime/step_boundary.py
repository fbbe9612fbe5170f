"""The step boundary on one rank: what it runs after the last action of its table each step.

One handler per step mode (``zbsolve.step``; the timing model of each is ``zbsolve.graph``'s):

- ``none``: every stage of the rank steps its optimizer; no global state (no clipping, no
  NaN/Inf check), as runs did before the step boundary existed.
- ``sync``: the rank adds its stages' squared gradient sums and NaN/Inf flags, one all-reduce
  gives every rank the global state (the CHECK job), and each stage takes the decided step.
- ``post-validation``: each stage steps speculatively as soon as the rank is done (keeping a
  snapshot of its parameters and optimizer state); the partial state travels from stage 0 to
  the last stage, each stage adding its own (the NORM chain); the last stage holds the global
  state and sends it back along the chain; each stage validates its step on receipt and, when
  the step needed clipping or saw NaN/Inf, restores the snapshot and takes the decided step
  (or none). The rank waits for the verdict before its next step starts (the model places
  that return trip in the next step's warm-up instead: see ``zbsolve.graph``).

The data-parallel reduction (AR) is not run: the runner has no data-parallel group.
Order of a rank's optimizer steps: the tail rule's, earliest ready first, i.e. in the order the
rank's stages ran their last backward (all at once under sync: by stage).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from zbsolve.runtime.optim import Decision, GradState, Snapshot, apply, decide, grad_state

_TAG = 15_015  # the partial-state messages, apart from the pipeline's hand-offs


@dataclass
class StageStep:
    """One stage of the rank: its parameters and its optimizer."""

    stage: int
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer


@dataclass
class Boundary:
    """The rank's side of the boundary in one step."""

    rank: int
    placement: list[int]  # stage -> rank
    stages: list[StageStep]  # this rank's, in the tail rule's order
    clip: float | None
    mark: Callable[[], Any]  # the runner's clock: a stamp
    comm_device: torch.device  # where collective payloads live (CPU for gloo)
    stamps: list[tuple[str, int, Any, Any]] = field(default_factory=list)  # kind, stage, t0, t1
    decision: Decision | None = None
    redone: list[int] = field(default_factory=list)  # stages that took the decided step late
    rolled_back: list[int] = field(default_factory=list)  # of those, the ones that had stepped
    #                                                        speculatively (snapshot restored)

    @property
    def last_stage(self) -> int:
        return len(self.placement) - 1

    def timed(self, kind: str, stage: int, work: Callable[[], Any]) -> Any:
        t0 = self.mark()
        out = work()
        self.stamps.append((kind, stage, t0, self.mark()))
        return out

    def send(self, state: GradState, stage: int) -> None:
        dist.send(state.to_tensor().to(self.comm_device), self.placement[stage], tag=_TAG)

    def recv(self, stage: int) -> GradState:
        buf = torch.empty(2, dtype=torch.float64, device=self.comm_device)
        dist.recv(buf, self.placement[stage], tag=_TAG)
        return GradState.from_tensor(buf.cpu())


def step_none(b: Boundary) -> None:
    for s in b.stages:
        b.timed("OPT", s.stage, s.opt.step)
    b.decision = Decision(False, 1.0, float("nan"))


def step_sync(b: Boundary) -> None:
    def check() -> GradState:
        local = sum((grad_state(s.params) for s in b.stages), GradState())
        t = local.to_tensor().to(b.comm_device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return GradState.from_tensor(t.cpu())

    b.decision = decide(b.timed("CHECK", -1, check), b.clip)
    for s in sorted(b.stages, key=lambda s: s.stage):  # all ready at once: by stage
        b.timed("OPT", s.stage, lambda s=s: apply(s.opt, s.params, b.decision))


def step_post_validation(b: Boundary) -> None:
    local: dict[int, GradState] = {}
    snaps: dict[int, Snapshot] = {}
    stepped: dict[int, bool] = {}

    def speculate(s: StageStep) -> None:
        local[s.stage] = grad_state(s.params)
        snaps[s.stage] = Snapshot(s.opt, s.params)
        # A stage whose own part already needs clipping or holds NaN/Inf does not bother: the
        # global verdict can only say the same.
        stepped[s.stage] = decide(local[s.stage], b.clip).plain
        if stepped[s.stage]:
            s.opt.step()

    for s in b.stages:
        b.timed("OPT", s.stage, lambda s=s: speculate(s))
    mine = {s.stage for s in b.stages}
    partial: dict[int, GradState] = {}

    def combine(t: int) -> None:  # the partial state of stages 0..t
        before = GradState() if t == 0 else partial[t - 1] if t - 1 in mine else b.recv(t - 1)
        partial[t] = before + local[t]
        if t < b.last_stage and t + 1 not in mine:
            b.send(partial[t], t + 1)

    for t in sorted(mine):
        b.timed("NORM", t, lambda t=t: combine(t))
    verdict: dict[int, GradState] = {}

    def receive(t: int) -> None:  # the global state, back from the last stage
        if t == b.last_stage:
            verdict[t] = partial[t]
        else:
            verdict[t] = verdict[t + 1] if t + 1 in mine else b.recv(t + 1)
        if t > 0 and t - 1 not in mine:
            b.send(verdict[t], t - 1)

    by_stage = {s.stage: s for s in b.stages}
    for t in sorted(mine, reverse=True):
        b.timed("VERDICT", t, lambda t=t: receive(t))
        decision = decide(verdict[t], b.clip)
        b.decision = decision
        if decision.plain and stepped[t]:
            continue
        s = by_stage[t]

        def redo(s: StageStep = s, t: int = t, decision: Decision = decision) -> None:
            if stepped[t]:
                snaps[t].restore(s.opt)
                b.rolled_back.append(t)
            apply(s.opt, s.params, decision)

        b.timed("REDO", t, redo)
        b.redone.append(t)


STEP_HANDLERS: dict[str, Callable[[Boundary], None]] = {
    "none": step_none,
    "sync": step_sync,
    "post-validation": step_post_validation,
}
"""The step boundary's handler per step mode."""


def tail_order(actions: list[Any], stages: list[int]) -> list[int]:
    """The rank's stages by the position of their last backward in its action list (the tail
    rule: earliest ready first; ties by stage)."""
    last = {s: -1 for s in stages}
    for i, a in enumerate(actions):
        if not a.is_comm and a.kind in ("W", "B", "I") and a.stage in last:
            last[a.stage] = i
    return sorted(stages, key=lambda s: (last[s], s))
