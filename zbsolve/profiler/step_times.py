"""Profiling the step boundary: what each stage's optimizer step and global check cost.

The runner's step boundary (``zbsolve.runtime.step_boundary``) does, per stage: the local part of
the global state (``grad_state``: squared sum and NaN/Inf flag of its gradients), in
post-validation a snapshot of its parameters and optimizer state, and the optimizer step. This
module times those three pieces on the stage's own modules (one process, the profiler's way)
and turns them into an instance's ``step`` section per mode, so the closed loop predicts each
mode's step with the figures its runner really pays:

- ``sync``: ``optimizer`` = the step; ``check`` = the slowest device's local norms (the sum over
  its stages) plus one hand-off latency ``comm`` for the all-reduce of two numbers (an
  assumption: the latency of a small message; the loop's ranks are local);
- ``post-validation``: ``optimizer`` = norm + snapshot + step (the speculative step does all
  three before the stage is done); the chain's hops cost ``comm`` each in the model already.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepTimes:
    """Per stage (ms, medians): the optimizer step, the local norm pass, the snapshot."""

    step: tuple[float, ...]
    norm: tuple[float, ...]
    snapshot: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"step": list(self.step), "norm": list(self.norm),
                "snapshot": list(self.snapshot)}


def _median_ms(watch, work, repeats: int, warmup: int) -> float:
    samples = []
    for k in range(warmup + repeats):
        ms, _ = watch.time(work)
        if k >= warmup:
            samples.append(ms)
    return statistics.median(samples)


def measure_step_times(model: dict[str, Any], stages: int, optimizer: str = "sgd",
                       lr: float | None = None, repeats: int = 10, warmup: int = 3,
                       threads: int = 1, clock: str = "wall") -> StepTimes:
    """Time each stage's step-boundary work on its modules (CPU, ``threads`` torch threads,
    the profiler's ``clock``), with gradients of the parameters' shapes (their values do not
    change the time)."""
    import torch

    from zbsolve.profiler.timing import Stopwatch
    from zbsolve.runtime.optim import DEFAULT_LR, OptimizerSpec, Snapshot, grad_state
    from zbsolve.runtime.workload import workload_for

    work = workload_for(model, stages, {})
    spec = OptimizerSpec(optimizer, DEFAULT_LR if lr is None else lr)
    spec.check()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    out: dict[str, list[float]] = {"step": [], "norm": [], "snapshot": []}
    watch = Stopwatch(clock=clock)
    try:
        gen = torch.Generator().manual_seed(0)
        for module in work.stages:
            params = [p for p in module.parameters() if p.requires_grad]
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 1e-3
            opt = spec.make(params)
            out["step"].append(_median_ms(watch, opt.step, repeats, warmup))
            out["norm"].append(_median_ms(watch, lambda ps=params: grad_state(ps), repeats,
                                          warmup))
            out["snapshot"].append(_median_ms(watch, lambda o=opt, ps=params: Snapshot(o, ps),
                                              repeats, warmup))
    finally:
        torch.set_num_threads(previous)
    return StepTimes(*(tuple(out[k]) for k in ("step", "norm", "snapshot")))


def step_section(times: StepTimes, mode: str, placement: tuple[int, ...], comm: float
                 ) -> dict[str, Any]:
    """The instance's ``step`` section for ``mode`` from measured times (module docstring)."""
    if mode == "sync":
        per_device: dict[int, float] = {}
        for stage, device in enumerate(placement):
            per_device[device] = per_device.get(device, 0.0) + times.norm[stage]
        return {"mode": mode, "optimizer": list(times.step),
                "check": max(per_device.values()) + comm}
    if mode == "post-validation":
        return {"mode": mode, "optimizer": [a + b + c for a, b, c in
                                            zip(times.norm, times.snapshot, times.step)]}
    raise ValueError(f"step mode: expected sync or post-validation, got {mode!r}")
