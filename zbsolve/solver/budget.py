"""The solve's time budget: one wall clock for every phase, or CP-SAT's deterministic time.

``SolveOptions.time_limit`` bounds the whole ``solve`` call: the hand-made schedules, the greedy
hint, the bounds and CP-SAT (or the window search) all draw on one ``Budget``. Phases that are
plain Python (a generator, the greedy, the analytic bound) cannot be asked to stop, so they run
under ``Budget.alarm``: a POSIX interval timer that raises ``OutOfTime`` inside the phase when
its share is spent (the phase's partial work is dropped, never half-used). Outside the main
thread (where signals cannot be delivered) the alarm is a no-op and the phases are only
checked between steps.

Deterministic mode (``SolveOptions.deterministic``): the limit is CP-SAT's deterministic time
(its own work measure, the same on every machine), CP-SAT's workers are interleaved so that
their trajectory does not depend on thread timing, and nothing is cut by the wall clock: every
hand-made family and greedy variant runs. The same command then returns the same schedule on
any machine, whatever its load, at the price of a wall time that follows the machine's speed.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

REPEAT = 0.05  # seconds between rings once a phase's alarm has gone off (see Budget.alarm)


class OutOfTime(BaseException):
    """A phase's share of the budget is spent (a BaseException: no ``except Exception`` inside
    a generator swallows it)."""


@dataclass
class Budget:
    """Seconds for the whole solve, measured from construction (wall clock), or deterministic."""

    limit: float
    deterministic: bool = False
    t0: float = field(default_factory=time.perf_counter)
    cp_dtime: float = 0.0  # deterministic time CP-SAT has used so far (deterministic mode)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        """Wall seconds left (infinite in deterministic mode: nothing is cut by the clock)."""
        if self.deterministic:
            return math.inf
        return self.limit - self.elapsed()

    def cp_left(self) -> float:
        """What CP-SAT may still use: wall seconds, or deterministic seconds."""
        if self.deterministic:
            return self.limit - self.cp_dtime
        return self.left()

    def share(self, fraction: float) -> float:
        """A phase's allowance: ``fraction`` of the whole limit, at most what is left."""
        return max(0.0, min(self.left(), fraction * self.limit))

    @contextmanager
    def alarm(self, seconds: float) -> Iterator[None]:
        """Raise ``OutOfTime`` in the body after ``seconds`` (wall); no-op when deterministic,
        infinite, or not on the main thread. Not reentrant: phases do not nest alarms."""
        usable = (not self.deterministic and math.isfinite(seconds)
                  and threading.current_thread() is threading.main_thread()
                  and hasattr(signal, "setitimer"))
        if not usable:
            yield
            return
        if seconds <= 0:
            raise OutOfTime()

        armed = [True]

        def ring(signum, frame):
            if armed[0]:  # a late ring while disarming must not escape the finally below
                raise OutOfTime()

        def lost(unraisable) -> None:
            if not isinstance(unraisable.exc_value, OutOfTime):
                hook(unraisable)

        previous = signal.signal(signal.SIGALRM, ring)
        # rings again every REPEAT seconds: a raise that lands in a weakref callback or a
        # __del__ is lost by Python, and the next ring then stops the phase. Such a lost raise
        # is dropped here, not handed to sys.unraisablehook: a hook that formats it (pytest's)
        # could itself be rung out of mid-way and fail (seen once in CI).
        hook = sys.unraisablehook
        sys.unraisablehook = lost
        signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT)
        try:
            yield
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            sys.unraisablehook = hook
