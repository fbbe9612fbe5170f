"""Anytime progress of a CP-SAT search: one line per improving solution, and a history.

The history (elapsed, incumbent, bound) is kept even when nothing is printed, so benchmarks
can plot convergence without re-running.

The bound shown never goes down: every lower bound proven so far still holds, so the best of
them is the bound. (CP-SAT's own bound can drop when the search restarts on a re-scaled model
or a window of the large method reports a bound of its sub-problem; printing that as "the
bound" would claim the gap grew.)
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ortools.sat.python import cp_model

GOAL_TOL = 1e-9  # relative: a value this close to ``Progress.goal`` meets it


def rel_gap(value: float, bound: float) -> float:
    """(value - bound) / value, 0 when value is 0; never negative."""
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


class Progress(cp_model.CpSolverSolutionCallback):
    """Solution callback; values are converted back to instance time units by ``unit``."""

    def __init__(self, unit: float, objective: str, echo: bool = False,
                 stream: TextIO | None = None, floor: float = 0.0):
        super().__init__()
        self.unit = unit
        self.objective = objective
        self.echo = echo
        self.stream = stream or sys.stderr
        self.floor = floor  # an external lower bound (analytic), in instance units
        # a value good enough (instance units): a bound proven outside the model, or that bound
        # widened by the caller's gap. The search stops at a solution that meets it
        # (``reached``) rather than prove it again
        self.goal: float | None = None
        self.reached = False
        self.best_bound = floor  # the largest bound reported so far: what is proven
        # False while a run's bound is not one of the instance (a run with device orders
        # kept): its solutions are shown and kept, its bound is not
        self.bounds_hold = True
        self.run_start = 0  # where in ``history`` the current CP-SAT run's entries begin
        self.t0 = time.perf_counter()
        self.history: list[tuple[float, float, float]] = []

    def _proven(self, bound: float) -> float:
        """``bound`` combined with every bound before it (the history's bounds never drop)."""
        self.best_bound = max(self.best_bound, bound, self.floor)
        return self.best_bound

    def line(self, elapsed: float, value: float, bound: float, what: str = "") -> str:
        bound = min(bound, value)  # nothing found is below a true lower bound; the solver's
        # final verdict clips the same way (a bound of the time-scaled model can exceed it)
        return (f"[{elapsed:8.2f}s] {self.objective} {value:.6g}  bound {bound:.6g}  "
                f"gap {100 * rel_gap(value, bound):.3f}%{('  ' + what) if what else ''}")

    def on_solution_callback(self) -> None:
        elapsed = time.perf_counter() - self.t0
        value = self.objective_value / self.unit
        bound = (self._proven(self.best_objective_bound / self.unit) if self.bounds_hold
                 else self.best_bound)
        self.history.append((elapsed, value, bound))
        if self.echo:
            print(self.line(elapsed, value, bound), file=self.stream, flush=True)
        if self.goal is not None and value <= self.goal * (1 + GOAL_TOL):
            self.reached = True
            self.stop_search()

    def on_bound(self, bound: float) -> None:
        """CP-SAT's ``best_bound_callback``: a line when the proven bound moves."""
        if not self.history or not self.bounds_hold:
            return  # no incumbent from CP-SAT yet (the first solution line shows the bound),
            # or a bound of a run with orders kept
        elapsed = time.perf_counter() - self.t0
        _, value, _ = self.history[-1]
        b = self._proven(bound / self.unit)
        self.history.append((elapsed, value, b))
        if self.echo:
            print(self.line(elapsed, value, b, "bound"), file=self.stream, flush=True)

    def note(self, value: float, bound: float, what: str) -> None:
        """A line that does not come from CP-SAT (start, hint, final verdict)."""
        bound = self._proven(bound)
        if self.echo:
            elapsed = time.perf_counter() - self.t0
            print(self.line(elapsed, value, bound, what), file=self.stream, flush=True)
