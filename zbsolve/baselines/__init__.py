"""The hand-made schedule library, by the names users know them by.

Generators are imported lazily so that asking for one family does not import all of them.
Each takes an Instance and returns a Schedule, or raises NotApplicable saying why not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from zbsolve.baselines.common import NotApplicable
from zbsolve.instance import Instance
from zbsolve.schedule import Schedule
from zbsolve.simulate import SimResult, simulate

_REGISTRY: dict[str, str] = {
    "gpipe": "classic:gpipe",
    "1f1b": "classic:one_f_one_b",
    "1f1b-interleaved": "interleaved:interleaved_1f1b",
    "1f1b-v": "vshape:one_f_one_b_v",
    "zb-h1": "zero_bubble:zb_h1",
    "zb-h2": "zero_bubble:zb_h2",
    "zb-v": "vshape:zb_v",
    "v-half": "vshape:v_half",
    "v-min": "vshape:v_min",
    "dualpipev": "dualpipe:dualpipev",
    "chimera": "chimera:chimera",
    "dualpipe": "dualpipe:dualpipe",
    "seq1f1b": "seq1f1b:seq1f1b",
    "seq1f1b-zb": "seq1f1b:seq1f1b_zb",
    "torch-interleaved-1f1b": "torch_orders:torch_interleaved_1f1b",
    "torch-looped-bfs": "torch_orders:torch_looped_bfs",
    "torch-interleaved-zb": "torch_orders:torch_interleaved_zb",
    "torch-zbv": "torch_orders:torch_zbv",
}
NAMES = tuple(_REGISTRY)

__all__ = ["NAMES", "NotApplicable", "BaselineResult", "generator", "generate", "evaluate_all",
           "best_feasible"]


def generator(name: str) -> Callable[[Instance], Schedule]:
    if name not in _REGISTRY:
        raise KeyError(f"unknown schedule {name!r}; known: {', '.join(NAMES)}")
    module, func = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(f"zbsolve.baselines.{module}"), func)


def generate(name: str, inst: Instance) -> Schedule:
    return generator(name)(inst)


@dataclass
class BaselineResult:
    name: str
    schedule: Schedule | None
    result: SimResult | None
    reason: str = ""  # why it does not apply

    @property
    def applicable(self) -> bool:
        return self.schedule is not None


def evaluate_all(inst: Instance, names: tuple[str, ...] = NAMES) -> list[BaselineResult]:
    """Generate and simulate every family; the simulator's figures are the ones reported."""
    out = []
    for name in names:
        try:
            sched = generate(name, inst)
        except NotApplicable as exc:
            out.append(BaselineResult(name, None, None, str(exc)))
            continue
        out.append(BaselineResult(name, sched, simulate(inst, sched)))
    return out


def best_feasible(
    inst: Instance, objective: str = "makespan", results: list[BaselineResult] | None = None
) -> BaselineResult | None:
    """The best hand-made schedule that fits the instance's memory limit (None if none fits)."""
    key = (lambda r: r.result.makespan) if objective == "makespan" else (lambda r: r.result.max_span)
    fits = [r for r in (results or evaluate_all(inst)) if r.applicable and r.result.feasible]
    return min(fits, key=key, default=None)
