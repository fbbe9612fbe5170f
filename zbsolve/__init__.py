"""zbsolve: pipeline-parallel training schedules, optimized with CP-SAT and checked by simulation.

The data path: ``instance`` -> ``dag`` -> ``baselines`` | ``solver`` -> ``schedule`` ->
``simulate`` -> ``export`` -> ``runtime``.

The public API, loaded on first use (``import zbsolve`` imports none of the layers, so neither
torch nor OR-Tools nor the solver until a name that needs them is touched):

- ``zbsolve.load_instance(path_or_dict)`` -> ``Instance``; ``zbsolve.load_schedule(path)``
- ``zbsolve.solve(inst, zbsolve.SolveOptions(...))`` -> ``SolveResult`` (imports OR-Tools)
- ``zbsolve.baselines`` (module): ``generate(name, inst)``, ``evaluate_all(inst)``, ``NAMES``
- ``zbsolve.simulate`` (module): ``simulate(inst, sched)``, ``validate(inst, sched)``
- ``zbsolve.export`` (module): ``write(inst, sched, fmt, path)``, ``FORMATS``

``simulate``, ``baselines`` and ``export`` are the modules, not functions: Python binds a
submodule to its package's attribute the moment anything imports it, so a function of the same
name would be replaced behind the user's back.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_FUNCTIONS = {
    "load_instance": ("zbsolve.instance", "load_instance"),
    "Instance": ("zbsolve.instance", "Instance"),
    "load_schedule": ("zbsolve.export.files", "load_schedule"),
    "Schedule": ("zbsolve.schedule", "Schedule"),
    "solve": ("zbsolve.solver", "solve"),
    "SolveOptions": ("zbsolve.solver", "SolveOptions"),
    "profile_layers": ("zbsolve.profiler.layers", "profile_layers"),  # needs torch
}
_MODULES = ("baselines", "simulate", "export")

__all__ = ["__version__", *_FUNCTIONS, *_MODULES]


def __getattr__(name: str) -> Any:
    """PEP 562: import what a public name needs when it is first used, then keep it."""
    if name in _FUNCTIONS:
        module, attr = _FUNCTIONS[name]
        value = getattr(importlib.import_module(module), attr)
    elif name in _MODULES:
        value = importlib.import_module(f"zbsolve.{name}")
    else:
        raise AttributeError(f"module 'zbsolve' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
