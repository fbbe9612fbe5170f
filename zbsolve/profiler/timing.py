"""Repeated timing with a warm-up, reported as a spread rather than one number.

Profiling noise is real on a shared machine: one sample can be off by a factor, so every
figure the profiler writes is the median of ``repeats`` samples taken after ``warmup`` discarded
ones, and the min, quartiles and max travel beside it so a reader can judge the noise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Spread:
    """Order statistics of one measured quantity (same unit as the samples)."""

    min: float
    q1: float
    median: float
    q3: float
    max: float
    n: int

    @staticmethod
    def of(samples: Sequence[float]) -> Spread:
        if not samples:
            raise ValueError("spread of no samples: repeats must be >= 1")
        xs = sorted(float(x) for x in samples)
        if len(xs) == 1:
            q1 = q3 = xs[0]
        else:
            q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return Spread(xs[0], q1, statistics.median(xs), q3, xs[-1], len(xs))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        """IQR / median: the noise figure printed in the profile table."""
        return self.iqr / self.median if self.median > 0 else float("inf")

    def scaled(self, factor: float) -> Spread:
        return Spread(self.min * factor, self.q1 * factor, self.median * factor,
                      self.q3 * factor, self.max * factor, self.n)

    def to_dict(self, digits: int = 6) -> dict[str, float]:
        return {k: (round(v, digits) if isinstance(v, float) else v)
                for k, v in asdict(self).items()}


CLOCKS = ("wall", "cpu")


class Stopwatch:
    """Timing of a region in milliseconds: wall clock or thread CPU time (CPU), CUDA events.

    On CUDA, kernels are asynchronous: ``perf_counter`` around a launch measures the launch only.
    Events recorded on the current stream and a synchronize before reading fix that.

    ``clock="cpu"`` (CPU only, one torch thread) counts the CPU time of the calling thread, which
    runs the whole op when torch has one intra-op thread (autograd runs CPU backward in the
    calling thread too). On a machine shared with other jobs, an op longer than the scheduler's
    time slice is preempted in most samples, so its wall-clock median can be several times its
    cost; its CPU time is not affected. On an idle core the two agree.
    """

    def __init__(self, cuda: bool = False, clock: str = "wall") -> None:
        if clock not in CLOCKS:
            raise ValueError(f"--clock: expected one of {CLOCKS}, got {clock!r}")
        if cuda and clock != "wall":
            raise ValueError("--clock cpu applies to CPU runs; on CUDA the profiler uses events")
        self.cuda = cuda
        self.clock = clock
        if cuda:
            import torch

            self._torch = torch

    def time(self, fn: Callable[[], object]) -> tuple[float, object]:
        """Run ``fn`` once; return (milliseconds, its result)."""
        if self.cuda:
            torch = self._torch
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)), out
        now = time.thread_time if self.clock == "cpu" else time.perf_counter
        t0 = now()
        out = fn()
        return (now() - t0) * 1e3, out


def check_counts(repeats: int, warmup: int) -> None:
    """Reject counts that would make the median meaningless, naming the flag to change."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r} (use --repeats N)")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup: expected an integer >= 0, got {warmup!r} (use --warmup N)")
