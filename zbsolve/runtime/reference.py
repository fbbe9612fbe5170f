"""The single-process reference the pipeline run is proven against.

Same model, same seed, same batches, same optimizer, but unsplit, in one process, one forward
and one backward over the whole batch with vanilla torch ops (no deferred weight gradients),
and the step taken synchronously (global gradient norm and NaN/Inf check over the whole model,
``zbsolve.runtime.optim``). Agreement therefore covers the stage split, the hand-offs, the I/W
split, the schedule and the step boundary (sync, or speculative steps rolled back and redone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from zbsolve.runtime.model import GPT, GPTConfig, lm_loss, make_batch
from zbsolve.runtime.optim import DEFAULT_LR, OptimizerSpec, TrainSpec, reference_step


@dataclass
class StepRecord:
    loss: float  # mean microbatch loss (= mean token loss, microbatches are equal-sized)
    grads: dict[str, torch.Tensor]  # by the unsplit model's parameter names


@dataclass
class ReferenceRun:
    steps: list[StepRecord]
    params: dict[str, torch.Tensor]  # after the last optimizer step
    decisions: list[str] = field(default_factory=list)  # per step: plain | clipped | skipped


def make_optimizer(params, lr: float = DEFAULT_LR) -> torch.optim.Optimizer:
    """Plain SGD (the default ``TrainSpec``'s): deterministic and elementwise, so sharded
    stages step exactly as one model."""
    return OptimizerSpec(lr=lr).make(params)


def run_reference(cfg: GPTConfig, microbatches: int, steps: int = 2,
                  train: TrainSpec | None = None, device: str | torch.device = "cpu", *,
                  lr: float | None = None) -> ReferenceRun:
    """``device``: where to compute (the pipeline's device, so a GPU run is not checked
    against hours of CPU work); results come back on the CPU. ``train``: the optimizer and
    its step (default: SGD at ``lr``, default learning rate, no clipping)."""
    if train is not None and lr is not None:
        raise ValueError("run_reference: give the learning rate in train.optimizer, not lr too")
    train = train or TrainSpec(OptimizerSpec(lr=DEFAULT_LR if lr is None else lr))  # SGD
    model = GPT(cfg).to(device)
    named = dict(model.named_parameters())
    opt = train.optimizer.make(named.values())
    records, decisions = [], []
    for step in range(steps):
        tokens, targets = make_batch(cfg, microbatches, step)
        opt.zero_grad()  # frees the gradients (torch >= 2: set_to_none)
        loss = lm_loss(model(tokens.to(device)), targets.to(device))
        loss.backward()
        records.append(StepRecord(
            float(loss.detach()),
            {n: p.grad.detach().cpu().clone() for n, p in named.items()},
        ))
        decisions.append(reference_step(opt, named, train, step).label)
    params = {n: p.detach().cpu().clone() for n, p in named.items()}
    del model, opt
    torch.cuda.empty_cache()  # a GPU run's cache back to the pipeline; a no-op without CUDA
    return ReferenceRun(records, params, decisions)


@dataclass
class Comparison:
    """Largest relative differences; a tensor's difference is max|a - b| / max|b| (inf-norms).

    Relative to the tensor's scale rather than elementwise: summing microbatch gradients in a
    different order moves near-zero entries by a few ulps of the tensor's scale, which an
    elementwise ratio would blow up without any real disagreement.

    A comparison can only pass on finite numbers of the right shape: a NaN or an infinity on
    either side (the run or the reference) is a failure naming the tensor (``nonfinite``), as
    are a tensor of another shape or one the reference does not have (``mismatched``) and one
    the run did not produce (``missing``). NaN compares False with everything, so a "largest
    difference" kept with ``>`` would otherwise let it through.
    """

    max_rel: float
    worst: str
    checked: int
    missing: list[str]
    nonfinite: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)

    def ok(self, rtol: float) -> bool:
        return (not self.missing and not self.nonfinite and not self.mismatched
                and self.max_rel <= rtol)

    def problems(self) -> list[str]:
        """What makes the comparison fail regardless of the tolerance, most severe first."""
        return ([f"non-finite {x}" for x in self.nonfinite]
                + [f"missing {x}" for x in self.missing]
                + [f"mismatched {x}" for x in self.mismatched])


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if not b.numel():
        return 0.0  # nothing differs
    a, b = a.detach(), b.detach()
    scale = float(b.abs().max())
    diff = float((a - b).abs().max())
    return diff / scale if scale > 0 else diff


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.detach()).all())


def compare(run_steps: list[StepRecord], run_params: dict[str, torch.Tensor],
            ref: ReferenceRun) -> Comparison:
    """Every loss, gradient and final parameter of the run against the reference."""
    cmp = Comparison(0.0, "", 0, [])

    def consider(name: str, value: float) -> None:
        cmp.checked += 1
        if value > cmp.max_rel or not cmp.worst:
            cmp.worst, cmp.max_rel = name, value

    def tensor(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
        if tuple(got.shape) != tuple(want.shape):
            cmp.mismatched.append(f"{name}: shape {tuple(got.shape)}, reference "
                                  f"{tuple(want.shape)}")
            return
        bad = [side for side, t in (("run", got), ("reference", want)) if not _finite(t)]
        if bad:
            cmp.checked += 1
            cmp.nonfinite.append(f"{name} (in the {' and the '.join(bad)})")
            return
        consider(name, rel_diff(got, want))

    def tensors(prefix: str, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
        for name, w in want.items():
            if name not in got:
                cmp.missing.append(f"{prefix} {name}")
            else:
                tensor(f"{prefix} {name}", got[name], w)
        for name in got:
            if name not in want:
                cmp.mismatched.append(f"{prefix} {name}: not in the reference")

    if len(run_steps) != len(ref.steps):
        cmp.missing.append(f"{len(run_steps)} steps run, {len(ref.steps)} in the reference")
    for i, (got, want) in enumerate(zip(run_steps, ref.steps)):
        name = f"step {i} loss"
        bad = [side for side, x in (("run", got.loss), ("reference", want.loss))
               if not math.isfinite(x)]
        if bad:
            cmp.checked += 1
            cmp.nonfinite.append(f"{name} (in the {' and the '.join(bad)})")
        else:
            consider(name, abs(got.loss - want.loss) / max(abs(want.loss), 1e-30))
        tensors(f"step {i} grad", got.grads, want.grads)
    tensors("param", run_params, ref.params)
    return cmp
