"""Measure what the memory modes cost on a stage: R, ``kept``, and the offload copies.

One sample per stage and round, on the runner's own stage code
(:class:`~zbsolve.runtime.stage_modes.StageModes`, what a run executes):

- **recompute**: F in recompute mode (no graph, the stage input kept), then R timed: the
  stage's forward re-run from the kept input, building what I and W need. ``kept`` is the
  bytes that recomputed F keeps (the stage input, and the targets on the last stage); the
  instance's ``recompute.kept`` is those bytes in its memory unit, and ``meta.modes`` gives them
  as a fraction of the stage's activation. The runner's models have no selective variant, so
  ``R_selective`` / ``kept_selective`` are not measured (``meta.modes`` says so).
- **offload** (CUDA only): a plain F, then O and L timed, each to the end of its copy on the
  copy stream (pinned host memory), with the bytes O moved: ``d2h`` / ``h2d`` per stage,
  ``fraction`` = moved / activation, the bandwidths in ``meta.modes``. On CPU a copy is a
  memory clone, not a device-host transfer: nothing is measured, the instance gets no
  ``offload`` field, and ``meta.modes.offload`` says why rather than invent figures.

Each sample ends with the unit's I and W (not timed), so the stage holds nothing after it.
"""

from __future__ import annotations

import time

import torch

from zbsolve.profiler.records import ModeSamples
from zbsolve.profiler.timing import Stopwatch

MODES = ("recompute", "offload")


def check_modes(modes: tuple[str, ...]) -> tuple[str, ...]:
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"--modes: expected a comma-separated list of {', '.join(MODES)}, "
                         f"got {', '.join(bad)}")
    return modes


def _finish(runner, mb: int, grad: torch.Tensor | None) -> None:
    runner.backward_input(mb, grad)
    runner.backward_weight(mb)


def sample_recompute(runner, mb: int, x: torch.Tensor, targets: torch.Tensor | None,
                     grad: torch.Tensor | None, watch: Stopwatch, into: ModeSamples) -> None:
    """F in recompute mode, R timed, then I and W."""
    runner.forward_mode(mb, x, targets, "recompute")
    into.kept.append(float(runner.checkpoints[mb].nbytes))
    t_r, _ = watch.time(lambda: runner.recompute(mb))
    into.R.append(t_r)
    _finish(runner, mb, grad)


def sample_offload(runner, mb: int, x: torch.Tensor, targets: torch.Tensor | None,
                   grad: torch.Tensor | None, copies, device: torch.device,
                   into: ModeSamples) -> None:
    """CUDA: F, then O and L each timed to the end of its copy, then I and W."""
    runner.forward(mb, x, targets)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    moved = runner.offload(mb, copies)
    torch.cuda.synchronize(device)
    t1 = time.perf_counter()
    runner.load(mb)
    torch.cuda.synchronize(device)
    t2 = time.perf_counter()
    into.d2h.append((t1 - t0) * 1e3)
    into.h2d.append((t2 - t1) * 1e3)
    into.moved.append(float(moved))
    _finish(runner, mb, grad)
