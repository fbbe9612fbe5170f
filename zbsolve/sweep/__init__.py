"""Memory-vs-bubble exploration: sweep memory limits (and layouts), keep the Pareto front.

``run_sweep(inst, SweepConfig(...))`` solves one case per (layout, limit) with zbsolve's solver,
lists every hand-made schedule that fits each limit, marks the fronts, and writes
``pareto.csv`` (all rows), ``front.csv`` and ``pareto.png``/``.svg`` under the output folder,
caching each solved case under ``cache/``.
"""

from zbsolve.sweep.front import (
    best_bubble_under_memory,
    envelope,
    metric_columns,
    pareto_flags,
    smallest_memory_for_bubble,
)
from zbsolve.sweep.layouts import Layout, layouts_for, reference_peak, relayout
from zbsolve.sweep.limits import parse_int_list, parse_limits
from zbsolve.sweep.runner import (
    Case,
    CaseOutcome,
    SolverParams,
    SweepConfig,
    SweepResult,
    evaluate_baselines,
    run_case,
    run_sweep,
    solve_with_zbsolve,
)

__all__ = [
    "Case", "CaseOutcome", "Layout", "SolverParams", "SweepConfig", "SweepResult",
    "best_bubble_under_memory", "envelope", "evaluate_baselines", "layouts_for",
    "metric_columns", "pareto_flags",
    "parse_int_list", "parse_limits", "reference_peak", "relayout", "run_case", "run_sweep",
    "smallest_memory_for_bubble", "solve_with_zbsolve",
]
