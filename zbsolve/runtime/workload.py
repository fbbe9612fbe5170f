"""What a run needs of its model, for the runner's GPT and for any layered model alike.

The runner and the torch engine build a :class:`Workload` from a job's model description and
then never ask which model it is: the stage modules (all S of them, identical on every rank),
the stage runner of each (the GPT's custom-op split or the graph split), the parameters under
the unsplit model's names, the batches, the boundary tensor's shape and the single-process
reference. A job's model is the GPT's config fields, or a :class:`~zbsolve.runtime.models.ModelSpec`
dict (it has a ``kind``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from zbsolve.runtime.optim import TrainSpec
from zbsolve.runtime.reference import ReferenceRun


@dataclass
class Workload:
    label: str
    summary: dict[str, Any]  # printed as the report's "model"
    stages: list[nn.Module]
    split: list[int]  # layers (GPT: blocks) per stage
    make_runner: Callable[..., Any]  # (module, index, n_stages, loss_fn, scale, memory) -> runner
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    names: Callable[[nn.Module], dict[str, nn.Parameter]]
    batch: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]
    microbatch: Callable[[torch.Tensor, int], torch.Tensor]
    boundary: tuple[int, ...]
    reference: Callable[[int, int, TrainSpec, torch.device], ReferenceRun]  # (m, steps, train,
    #                                                                          device)
    key: tuple  # identifies the model for the reference cache


def is_layered(model: dict[str, Any]) -> bool:
    return "kind" in model


def gpt_workload(model: dict[str, Any], n_stages: int) -> Workload:
    from zbsolve.runtime.iw_split import StageRunner
    from zbsolve.runtime.model import (
        GPTConfig,
        build_stage_modules,
        layer_split,
        lm_loss,
        make_batch,
        microbatch,
    )
    from zbsolve.runtime.reference import run_reference

    cfg = GPTConfig(**model)
    return Workload(
        label="gpt", summary=cfg.to_dict(), stages=list(build_stage_modules(cfg, n_stages)),
        split=[len(r) for r in layer_split(cfg.layers, n_stages)], make_runner=StageRunner,
        loss_fn=lm_loss, names=lambda module: module.global_names(),
        batch=lambda m, step: make_batch(cfg, m, step),
        microbatch=lambda t, mb: microbatch(t, cfg, mb),
        boundary=(cfg.microbatch_size, cfg.seq, cfg.hidden),
        reference=lambda m, steps, train, device: run_reference(cfg, m, steps, train, device),
        key=("gpt", cfg))


def layered_workload(model: dict[str, Any], n_stages: int, split: list[int] | None = None,
                     fallbacks: dict[str, str] | None = None) -> Workload:
    """A layered model cut by ``split`` (the table's ``instance.meta.split``) or evenly.

    ``fallbacks`` (layer name -> reason, the profile's): a stage holding such a layer runs its
    backward fused, as the profile measured it."""
    from zbsolve.runtime.layered import GraphStageRunner
    from zbsolve.runtime.models import ModelSpec, ModelSpecError, spec_summary

    spec = ModelSpec.from_dict(model)
    built = spec.build()
    split = list(split) if split else built.default_split(n_stages)
    if len(split) != n_stages:
        raise ModelSpecError(f"split {split} has {len(split)} stages, the table has {n_stages}")
    stages = built.stages(split)

    def reference(m: int, steps: int, train: TrainSpec, device: torch.device) -> ReferenceRun:
        return run_layered_reference(spec, m, steps, train, device)

    fused = {}
    for index, stage in enumerate(stages):
        reasons = [f"{name}: {fallbacks[name]}" for name in stage.names if name in (fallbacks or {})]
        if reasons:
            fused[index] = "; ".join(reasons)

    def make_runner(module, index, n, loss_fn, scale, memory):
        return GraphStageRunner(module, index, n, loss_fn, scale, memory,
                                fused=fused.get(index, ""))

    import json
    return Workload(
        label=spec.kind, summary=spec_summary(spec), stages=list(stages), split=split,
        make_runner=make_runner, loss_fn=built.loss_fn, names=built.global_names,
        batch=built.batch, microbatch=built.microbatch, boundary=tuple(built.boundary),
        reference=reference, key=(spec.kind, json.dumps(model, sort_keys=True, default=str)))


def workload_for(model: dict[str, Any], n_stages: int, table_instance: dict[str, Any]) -> Workload:
    if not is_layered(model):
        return gpt_workload(model, n_stages)
    meta = table_instance.get("meta") or {}
    return layered_workload(model, n_stages, meta.get("split"), meta.get("fallbacks"))


def run_layered_reference(spec, microbatches: int, steps: int = 2,
                          train: TrainSpec | None = None,
                          device: str | torch.device = "cpu") -> ReferenceRun:
    """The unsplit model through its own forward, one process, vanilla autograd."""
    train = train or TrainSpec()
    from zbsolve.runtime.optim import reference_step
    from zbsolve.runtime.reference import StepRecord

    built = spec.build()
    model = built.reference.to(device)
    names = {built.param_names[id(p)]: p for p in model.parameters() if p.requires_grad}
    opt = train.optimizer.make(names.values())
    records, decisions = [], []
    for step in range(steps):
        tokens, targets = built.batch(microbatches, step)
        opt.zero_grad(set_to_none=True)
        loss = built.loss_fn(model(tokens.to(device)), targets.to(device))
        loss.backward()
        records.append(StepRecord(float(loss.detach()),
                                  {n: p.grad.detach().cpu().clone() for n, p in names.items()
                                   if p.grad is not None}))
        decisions.append(reference_step(opt, names, train, step).label)
    params = {n: p.detach().cpu().clone() for n, p in names.items()}
    return ReferenceRun(records, params, decisions)
