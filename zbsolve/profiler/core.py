"""Measure what the runner executes: per logical stage F, I and W times and activation bytes.

The stages are the runner's own (:func:`zbsolve.runtime.model.build_stage_modules`, the same
layer split) and are driven through the runner's :class:`~zbsolve.runtime.iw_split.StageRunner`
(the same I/W split: I = one autograd pass for the input gradient, W = the deferred
weight-gradient products), with the loss on the last stage scaled by 1/m as in a run. So the
profile is of exactly the code a schedule is later run with, not of a look-alike.

Each sample is one microbatch through F, then I, then W, timed op by op; the first ``warmup``
samples are discarded (allocator and kernel warm-up, first ``.grad`` allocation).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import torch

from zbsolve.profiler.records import ModeProfile, ModeSamples, StageProfile
from zbsolve.profiler.timing import Spread, Stopwatch, check_counts
from zbsolve.runtime.iw_split import StageRunner
from zbsolve.runtime.model import GPTConfig, build_stage_modules, layer_split, lm_loss


def _inputs(cfg: GPTConfig, stage: int, n_stages: int,
            gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(stage input, targets on the last stage, output gradient elsewhere) of one microbatch."""
    b, s, h = cfg.microbatch_size, cfg.seq, cfg.hidden
    if stage == 0:
        x = torch.randint(0, cfg.vocab, (b, s), generator=gen)
    else:
        x = torch.randn(b, s, h, generator=gen)
    last = stage == n_stages - 1
    targets = torch.randint(0, cfg.vocab, (b, s), generator=gen) if last else None
    grad = None if last else torch.randn(b, s, h, generator=gen) * 1e-3
    return x, targets, grad


@dataclass
class _StageState:
    """One stage's runner and the samples gathered for it so far."""

    runner: StageRunner
    gen: torch.Generator
    times: dict[str, list[float]]
    saved: list[float]
    held: list[float]
    modes: ModeSamples | None = None  # memory-mode samples (profile_model(modes=...))


def _sample(cfg: GPTConfig, st: _StageState, n_stages: int, mb: int, watch: Stopwatch,
            device: torch.device, keep: bool) -> None:
    """One microbatch through F, I, W of one stage: times and memory deltas."""
    runner = st.runner
    cuda = device.type == "cuda"

    def mem() -> int:
        return torch.cuda.memory_allocated(device) if cuda else runner.memory.current

    # On CUDA the deltas are taken around the arrival of the inputs, as on a pipeline device:
    # the received activation counts for F (the graph keeps it), the received output gradient
    # for I (the W store keeps it), so it is created only after F.
    before = mem()
    x, targets, grad_cpu = _inputs(cfg, runner.index, n_stages, st.gen)
    x = x.to(device)
    targets = None if targets is None else targets.to(device)
    if cuda:
        torch.cuda.synchronize(device)
    t_f, out = watch.time(partial(runner.forward, mb, x, targets))
    del out, x  # handed on: the runner keeps its own reference when the backward needs it
    after_f = mem()
    grad = None if grad_cpu is None else grad_cpu.to(device)
    if cuda:
        torch.cuda.synchronize(device)
    t_i, grad_in = watch.time(partial(runner.backward_input, mb, grad))
    del grad_in, grad  # handed upstream
    after_i = mem()
    t_w, _ = watch.time(partial(runner.backward_weight, mb))
    if keep:
        st.times["F"].append(t_f)
        st.times["I"].append(t_i)
        st.times["W"].append(t_w)
        st.saved.append(after_f - before)
        st.held.append(after_i - before)


def _sample_modes(cfg: GPTConfig, st: _StageState, n_stages: int, mb: int, watch: Stopwatch,
                  device: torch.device, modes: tuple[str, ...], copies) -> None:
    """One sample of each measured memory mode (:mod:`zbsolve.profiler.modes`)."""
    from zbsolve.profiler.modes import sample_offload, sample_recompute

    assert st.modes is not None
    for mode in modes:
        x, targets, grad = (None if t is None else t.to(device)
                            for t in _inputs(cfg, st.runner.index, n_stages, st.gen))
        assert x is not None
        if mode == "recompute":
            sample_recompute(st.runner, mb, x, targets, grad, watch, st.modes)
        elif copies is not None:  # offload: CUDA only
            sample_offload(st.runner, mb, x, targets, grad, copies, device, st.modes)


def profile_model(cfg: GPTConfig, n_stages: int, microbatches: int, *, warmup: int = 3,
                  repeats: int = 10, device: torch.device | None = None,
                  interval: float = 0.0, clock: str = "wall",
                  modes: tuple[str, ...] = ()) -> list[StageProfile]:
    """Profile every logical stage of ``cfg`` split into ``n_stages`` (the runner's split).

    ``modes`` (recompute, offload) also measures each round what those memory modes cost
    (:mod:`zbsolve.profiler.modes`; offload on CUDA only).

    Samples are taken round-robin over the stages (sample i of every stage before sample i+1 of
    any), so a slow patch of a shared machine spreads over all stages instead of inflating one.
    ``interval`` (seconds) sleeps between rounds: spreading the samples over a longer window
    keeps a burst of other work shorter than half the window out of the median.
    """
    if not (interval >= 0 and math.isfinite(interval)):
        raise ValueError(f"interval: expected seconds >= 0, got {interval!r} (--sample-interval)")
    check_counts(repeats, warmup)
    layer_split(cfg.layers, n_stages)  # raises with the fix when there are too few layers
    device = device or torch.device("cpu")
    watch = Stopwatch(cuda=device.type == "cuda", clock=clock)
    if clock == "cpu" and torch.get_num_threads() != 1:
        raise ValueError("--clock cpu counts the calling thread only: use it with --threads 1")
    states = []
    for s, module in enumerate(build_stage_modules(cfg, n_stages)):
        runner = StageRunner(module.to(device), s, n_stages, loss_fn=lm_loss,
                             loss_scale=1.0 / microbatches)
        states.append(_StageState(runner, torch.Generator().manual_seed(1000 + s),
                                  {"F": [], "I": [], "W": []}, [], [],
                                  ModeSamples() if modes else None))
    copies = None
    if "offload" in modes and device.type == "cuda":
        from zbsolve.runtime.stage_modes import HostCopies

        copies = HostCopies(device)
    for i in range(warmup + repeats):
        if interval and i:
            time.sleep(interval)
        for st in states:
            _sample(cfg, st, n_stages, i, watch, device, keep=i >= warmup)
            if modes and i >= warmup:
                _sample_modes(cfg, st, n_stages, i, watch, device, modes, copies)
    method = ("CUDA allocator deltas across F and across F+I" if device.type == "cuda" else
              "runner's count of tensors saved for backward (F) and of its deferred "
              "weight-gradient store (after I)")
    out = []
    for st in states:
        module = st.runner.module
        module.zero_grad(set_to_none=True)
        out.append(StageProfile(
            stage=st.runner.index, layers=len(module.blocks), first=st.runner.is_first,
            last=st.runner.is_last, F=Spread.of(st.times["F"]), I=Spread.of(st.times["I"]),
            W=Spread.of(st.times["W"]), saved_bytes=Spread.of(st.saved).median,
            held_bytes=max(Spread.of(st.held).median, 0.0),
            param_bytes=sum(p.numel() * p.element_size() for p in module.parameters()),
            memory_method=method,
            modes=ModeProfile.of(st.modes) if st.modes is not None else None,
        ))
    return out
