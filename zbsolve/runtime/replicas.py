"""Two model replicas in one pipeline (Chimera, DualPipe): the stage copies and their gradient sync.

Graph stage ``r*S + s`` is replica r's copy of model stage s (``zbsolve.instance``); replica r
runs the microbatches j with j mod R = r. Every rank builds the model's S stage modules from
one seed (the workload), so it holds replica 0's copies as built and makes replica 1's as deep
copies of the same modules: both copies of a stage start equal, and each is named as the
unsplit model names it.

Each microbatch's loss is scaled by 1/m (m = all microbatches, both replicas), so after the
step's compute copy r's gradient is its replica's share of the full-batch mean. The two copies
of model stage s then **sum** their gradients (``sync_gradients``): one flat all-reduce per
stage on a two-rank process group made for that pair of ranks, or an in-memory sum when one
rank holds both copies. After it, both copies hold the full-batch gradient and step
identically (SGD is elementwise and both see the same bits: gloo's two-rank sum is one
addition, a + b = b + a).

Why it cannot deadlock with the table's P2P: a rank starts syncing only after its last action
and ``P2P.finish`` (every send done, every receive consumed), and no P2P wait ever depends on a
sync, so the P2P phase ends on every rank (the table's own proof). The syncs then run in
increasing model stage on every rank: the smallest stage whose sync has not finished has both
its ranks past all smaller ones, so both are in it and it completes (induction). The syncs use
their own process groups, so their messages never match a P2P message.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class ReplicaLayout:
    """Which graph stage is which replica's copy of which model stage, and where it lives."""

    model_stages: int  # S
    replicas: int  # R (1 or 2)
    placement: tuple[int, ...]  # graph stage (R*S of them) -> rank

    def model_stage(self, stage: int) -> int:
        return stage % self.model_stages

    def replica(self, stage: int) -> int:
        return stage // self.model_stages

    def copies(self, model_stage: int) -> tuple[int, ...]:
        """The graph stages holding model stage ``model_stage``, replica 0 first."""
        return tuple(r * self.model_stages + model_stage for r in range(self.replicas))

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    def sync_ranks(self, model_stage: int) -> tuple[int, ...]:
        """The distinct ranks holding a copy of ``model_stage``, ascending."""
        return tuple(sorted({self.placement[s] for s in self.copies(model_stage)}))


def layout_of(table: Any) -> ReplicaLayout:
    """The layout of an executor table (its ``instance`` is the replica-0 form)."""
    replicas = int(table.instance.get("replicas", 1))
    return ReplicaLayout(len(table.placement) // replicas, replicas, tuple(table.placement))


def stage_copies(work: Any, layout: ReplicaLayout, rank: int
                 ) -> dict[int, tuple[nn.Module, dict[str, nn.Parameter]]]:
    """This rank's graph stages -> (module, its parameters by the unsplit model's names).

    Replica 0 uses the workload's modules; a replica > 0 copy is a deep copy of the same
    module, its parameters named through the original's (a layered model names parameters by
    identity, which a copy does not keep)."""
    out = {}
    for stage in layout.stages_of(rank):
        original = work.stages[layout.model_stage(stage)]
        names = work.names(original)
        if layout.replica(stage) == 0:
            out[stage] = (original, names)
            continue
        clone = copy.deepcopy(original)
        by_id = {id(p): n for n, p in names.items()}
        out[stage] = (clone, {by_id[id(p)]: q for p, q in zip(original.parameters(),
                                                               clone.parameters())
                              if id(p) in by_id})
    return out


def sync_groups(layout: ReplicaLayout, cache: dict[tuple[int, ...], Any]) -> None:
    """Create the two-rank process group of every pair of ranks that syncs a stage.

    ``dist.new_group`` is collective over the whole world: every rank calls this with the same
    layout, in the same order, and the groups are cached (``cache``) for later jobs."""
    if layout.replicas < 2:
        return
    for s in range(layout.model_stages):
        ranks = layout.sync_ranks(s)
        if len(ranks) == 2 and ranks not in cache:
            cache[ranks] = dist.new_group(ranks=list(ranks))


def sync_gradients(layout: ReplicaLayout, rank: int,
                   copies: dict[int, tuple[nn.Module, dict[str, nn.Parameter]]],
                   groups: dict[tuple[int, ...], Any], clock: Any) -> list[tuple[int, Any, Any]]:
    """Sum the weight gradients of the copies of every model stage this rank holds a copy of,
    in increasing model stage (see the module docstring); returns (model stage, start, end)
    clock stamps."""
    stamps = []
    if layout.replicas < 2:
        return stamps
    for s in range(layout.model_stages):
        mine = [st for st in layout.copies(s) if st in copies]
        if not mine:
            continue
        t0 = clock.mark()
        if len(mine) == len(layout.copies(s)):  # this rank holds every copy: sum in memory
            _sum_local([_params(copies[st][0]) for st in mine])
        else:
            params = _params(copies[mine[0]][0])
            flat = torch.cat([_grad(p).reshape(-1) for p in params])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=groups[layout.sync_ranks(s)])
            _unflatten(flat, params)
        stamps.append((s, t0, clock.mark()))
    return stamps


def _params(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def _grad(p: nn.Parameter) -> torch.Tensor:
    """A parameter's gradient, zeros when this copy's microbatches left it untouched."""
    return p.grad if p.grad is not None else torch.zeros_like(p)


def _unflatten(flat: torch.Tensor, params: list[nn.Parameter]) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def _sum_local(per_copy: list[list[nn.Parameter]]) -> None:
    for group in zip(*per_copy):
        total = _grad(group[0]).clone()
        for p in group[1:]:
            total += _grad(p)
        for p in group:
            p.grad = total.clone()
