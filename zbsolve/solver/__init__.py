"""The schedule optimizer: CP-SAT model, analytic bounds, and the ``solve`` front door.

``from zbsolve.solver import SolveOptions, SolveResult, solve, InfeasibleMemoryError``.
Model building for other search schemes: ``zbsolve.solver.model.build_model``.
"""

from zbsolve.solver.api import SolveOptions, SolveResult, solve
from zbsolve.solver.bounds import InfeasibleMemoryError, analytic_bound, min_memory_limit

__all__ = ["SolveOptions", "SolveResult", "solve", "InfeasibleMemoryError", "analytic_bound",
           "min_memory_limit"]
