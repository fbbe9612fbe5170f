"""zbsolve: pipeline-parallel training schedules, optimized with CP-SAT and checked by simulation.

The data path: ``instance`` -> ``dag`` -> ``baselines`` | ``solver`` -> ``schedule`` ->
``simulate`` -> ``export`` -> ``runtime``. Importing this package imports none of the layers,
so the solver stays free of torch.
"""

__version__ = "0.1.0"
