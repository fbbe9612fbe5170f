"""The step boundary: what happens after a stage's last W, as the instance describes it.

A real training step does not end at the last W. Each stage reduces its gradients over its
data-parallel group (``allreduce``), gradient clipping and the mixed-precision NaN/Inf check
need a global state (the norm over every stage, a flag), and then every stage runs its optimizer
(``optimizer``). How the global state is obtained is the ``mode``:

- ``none`` (the default): the step ends at the last W, as every published table counts it.
- ``sync``: every stage waits for one global reduction (``check``: its latency) after every
  stage's reduction, then steps.
- ``post-validation`` (the Zero Bubble paper's optimizer post-validation): every stage steps
  speculatively right after its own reduction; the partial state travels along the pipeline and a
  step that needed clipping or saw NaN/Inf is rolled back and redone (rare, not priced here).

The jobs these become, and why which of them occupy a device, are defined in ``zbsolve.graph``
(module docstring, "The step boundary"); this module only holds and parses the figures.

Instance syntax::

    step:
      mode: post-validation   # none | sync | post-validation (default none)
      optimizer: 1.5          # per model stage: a number or a list of S numbers (default 0)
      allreduce: 0.8          # per model stage, data-parallel gradient reduction (default 0)
      check: 0.4              # the global norm/NaN reduction's latency (sync) (default 0)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

MODES = ("none", "sync", "post-validation")
NONE, SYNC, POST = MODES
_KEYS = ("mode", "optimizer", "allreduce", "check")


class StepError(ValueError):
    """A bad ``step`` field; the message names it and says what is expected."""


@dataclass(frozen=True)
class StepSpec:
    """The step boundary of an instance. Tables are per graph stage (replicas repeat replica 0's
    values, as every per-stage table of ``Instance`` does); empty = all zero."""

    mode: str = NONE
    optimizer: tuple[float, ...] = ()
    allreduce: tuple[float, ...] = ()
    check: float = 0.0

    @property
    def active(self) -> bool:
        """Whether the step's jobs exist (mode sync or post-validation)."""
        return self.mode != NONE

    @property
    def given_times(self) -> bool:
        """Whether any step job lasts longer than 0."""
        return self.check > 0 or any(self.optimizer) or any(self.allreduce)

    @property
    def given(self) -> bool:
        """Whether anything differs from the default (so files write it back)."""
        return self.mode != NONE or self.given_times

    def opt_time(self, stage: int) -> float:
        return self.optimizer[stage] if self.optimizer else 0.0

    def reduce_time(self, stage: int) -> float:
        return self.allreduce[stage] if self.allreduce else 0.0

    def times(self) -> list[float]:
        """Every duration a step job can have (for the solver's integer time scale)."""
        return [*self.optimizer, *self.allreduce, self.check]

    def scaled(self, to_model: Any) -> StepSpec:
        """The same step with every duration mapped through ``to_model`` (model units)."""
        return dataclasses.replace(
            self, optimizer=tuple(float(to_model(x)) for x in self.optimizer),
            allreduce=tuple(float(to_model(x)) for x in self.allreduce),
            check=float(to_model(self.check)))

    def to_dict(self, model_stages: int) -> dict[str, Any]:
        def compact(values: tuple[float, ...]) -> Any:
            values = values[:model_stages]
            if not values:
                return 0.0
            return values[0] if len(set(values)) == 1 else list(values)

        return {"mode": self.mode, "optimizer": compact(self.optimizer),
                "allreduce": compact(self.allreduce), "check": self.check}


def with_mode(inst: Any, mode: str) -> Any:
    """A copy of ``inst`` whose step runs in ``mode`` (its step figures kept): what
    ``zbsolve solve --step MODE`` and ``zbsolve baselines --step MODE`` evaluate."""
    check_mode(mode, "step.mode")
    return dataclasses.replace(inst, step=dataclasses.replace(inst.step, mode=mode))


def for_mode(inst: Any, mode: str | None, where: str = "--step") -> Any:
    """``inst`` with its step in ``mode`` (None: as the instance says). An active mode on an
    instance that gives no step times is refused: its jobs would all last 0 and every figure
    would look like mode none's."""
    if mode is None:
        return inst
    check_mode(mode, where)
    if mode != NONE and not inst.step.given_times:
        raise StepError(f"{where} {mode}: the instance gives no step times (step.optimizer, "
                        "step.allreduce and step.check are all 0); add them to it, e.g. "
                        "step: {optimizer: 2.0, allreduce: 1.0, check: 0.5}")
    return with_mode(inst, mode)


def check_mode(mode: Any, where: str) -> str:
    if mode not in MODES:
        raise StepError(f"{where}: expected one of {', '.join(MODES)}, got {mode!r}")
    return mode


def parse_step(raw: Any, model_stages: int, replicas: int) -> StepSpec:
    """The ``step`` mapping of an instance file (absent: the default, mode none)."""
    if raw is None:
        return StepSpec()
    if not isinstance(raw, dict):
        raise StepError(f"step: expected a mapping with keys {', '.join(_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise StepError(f"step: unknown key(s) {unknown}; expected {', '.join(_KEYS)}")
    mode = check_mode(raw.get("mode", NONE), "step.mode")
    optimizer = _per_stage(raw.get("optimizer", 0.0), model_stages, "step.optimizer")
    allreduce = _per_stage(raw.get("allreduce", 0.0), model_stages, "step.allreduce")
    check = _time(raw.get("check", 0.0), "step.check")
    return StepSpec(mode, optimizer * replicas, allreduce * replicas, check)


def _time(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise StepError(f"{where}: expected a time >= 0, got {value!r}")
    return float(value)


def _per_stage(value: Any, n: int, where: str) -> tuple[float, ...]:
    """A number for every model stage, or a list of exactly n numbers."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise StepError(f"{where}: expected one time per model stage ({n}), got a list of "
                            f"{len(value)}")
        return tuple(_time(x, f"{where}[{i}]") for i, x in enumerate(value))
    return (_time(value, where),) * n
