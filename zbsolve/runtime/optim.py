"""The optimizer step as both the pipeline runner and the reference take it.

One definition of what a training step does after the backward, so the pipeline (where every
stage steps its own parameters, synchronously or speculatively) and the single-process
reference (one optimizer over the whole model) can only differ in where the work happens:

- the optimizer: plain SGD (the default: elementwise, so the pipeline's per-stage optimizers
  step exactly as one) or AdamW (per-parameter state: also exact when split by stage);
- the global state a step needs: the sum of squared gradient entries (in float64, so the order
  the stages add their parts in moves nothing at fp32 precision) and whether any is NaN/Inf;
- the decision taken from it (``decide``): skip the step on NaN/Inf (what a loss scaler does),
  scale the gradients by ``clip / (norm + 1e-6)`` when the norm exceeds ``clip`` (torch's
  ``clip_grad_norm_`` rule), else step as is;
- a snapshot of parameters and optimizer state, so a speculative step can be rolled back.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

DEFAULT_LR = 0.05
OPTIMIZERS = ("sgd", "adamw")
CLIP_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_


@dataclass(frozen=True)
class OptimizerSpec:
    """Which optimizer, its learning rate, and the clipping threshold (None: no clipping)."""

    kind: str = "sgd"
    lr: float = DEFAULT_LR
    clip: float | None = None
    weight_decay: float = 0.01  # AdamW only

    def check(self) -> None:
        if self.kind not in OPTIMIZERS:
            raise ValueError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, got "
                             f"{self.kind!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr: expected a learning rate > 0, got {self.lr!r}")
        if self.clip is not None and not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"clip: expected a gradient norm > 0, got {self.clip!r}")

    def make(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        params = list(params)
        if self.kind == "adamw":
            return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=self.lr)


@dataclass(frozen=True)
class TrainSpec:
    """Everything the reference needs to take the same steps: the optimizer, and (tests) an
    Inf written into one gradient at one step: ``(step, parameter name)``."""

    optimizer: OptimizerSpec = OptimizerSpec()
    inject_inf: tuple[int, str] | None = None


@dataclass(frozen=True)
class GradState:
    """The part of the global state some gradients contribute (partial, or global once all
    stages have added theirs)."""

    sq_sum: float = 0.0
    nonfinite: bool = False

    def __add__(self, other: GradState) -> GradState:
        return GradState(self.sq_sum + other.sq_sum, self.nonfinite or other.nonfinite)

    @property
    def norm(self) -> float:
        return math.sqrt(self.sq_sum) if math.isfinite(self.sq_sum) else math.inf

    def to_tensor(self) -> torch.Tensor:
        return torch.tensor([self.sq_sum, float(self.nonfinite)], dtype=torch.float64)

    @staticmethod
    def from_tensor(t: torch.Tensor) -> GradState:
        sq, flag = (float(x) for x in t.tolist())
        return GradState(sq, flag > 0)


def grad_state(params: Iterable[torch.nn.Parameter]) -> GradState:
    """The squared-sum and NaN/Inf flag of these parameters' gradients."""
    sq, bad = 0.0, False
    for p in params:
        if p.grad is None:
            continue
        g = p.grad.detach().double()
        sq += float(g.pow(2).sum())
        bad = bad or not bool(torch.isfinite(g).all())
    return GradState(sq, bad or not math.isfinite(sq))


@dataclass(frozen=True)
class Decision:
    """What the step does: ``skip`` it, or step with gradients scaled by ``scale`` (1 = as is)."""

    skip: bool
    scale: float = 1.0
    norm: float = 0.0

    @property
    def plain(self) -> bool:
        """A step with the gradients as they are: what a speculative step assumed."""
        return not self.skip and self.scale == 1.0

    @property
    def label(self) -> str:
        return "skipped" if self.skip else ("clipped" if self.scale != 1.0 else "plain")


def decide(state: GradState, clip: float | None) -> Decision:
    if state.nonfinite:
        return Decision(True, 1.0, state.norm)
    norm = state.norm
    if clip is not None and norm > clip:
        return Decision(False, clip / (norm + CLIP_EPS), norm)
    return Decision(False, 1.0, norm)


def apply(opt: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter],
          decision: Decision) -> None:
    """Take the decided step (scaling the gradients in place first when clipped)."""
    if decision.skip:
        return
    if decision.scale != 1.0:
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(decision.scale)
    opt.step()


class Snapshot:
    """Parameters and optimizer state as they were: what a rollback restores."""

    def __init__(self, opt: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]):
        self.params = list(params)
        self.values = [p.detach().clone() for p in self.params]
        self.state = copy.deepcopy(opt.state_dict())

    def restore(self, opt: torch.optim.Optimizer) -> None:
        with torch.no_grad():
            for p, v in zip(self.params, self.values):
                p.copy_(v)
        opt.load_state_dict(self.state)


def inject_inf(named: dict[str, torch.nn.Parameter], name: str) -> None:
    """Write Inf into the first entry of ``name``'s gradient (tests of the NaN/Inf check)."""
    grad = named[name].grad
    if grad is None:
        raise RuntimeError(f"inject_inf: {name} has no gradient to corrupt")
    with torch.no_grad():
        grad.view(-1)[0] = math.inf


def reference_step(opt: torch.optim.Optimizer, named: dict[str, torch.nn.Parameter],
                   train: TrainSpec, step: int) -> Decision:
    """The synchronous step of the single-process reference: the global state over the whole
    model, then the decided step."""
    if train.inject_inf is not None and train.inject_inf[0] == step:
        inject_inf(named, train.inject_inf[1])
    decision = decide(grad_state(named.values()), train.optimizer.clip)
    apply(opt, list(named.values()), decision)
    return decision
