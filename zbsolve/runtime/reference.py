"""The single-process reference the pipeline run is proven against.

Same model, same seed, same batches, same optimizer, but unsplit, in one process, one forward
and one backward over the whole batch with vanilla torch ops (no deferred weight gradients),
and the step taken synchronously (global gradient norm and NaN/Inf check over the whole model,
``zbsolve.runtime.optim``). Agreement therefore covers the stage split, the hand-offs, the I/W
split, the schedule and the step boundary (sync, or speculative steps rolled back and redone).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from zbsolve.runtime.model import GPT, GPTConfig, lm_loss, make_batch
from zbsolve.runtime.optim import TrainSpec, reference_step


@dataclass
class StepRecord:
    loss: float  # mean microbatch loss (= mean token loss, microbatches are equal-sized)
    grads: dict[str, torch.Tensor]  # by the unsplit model's parameter names


@dataclass
class ReferenceRun:
    steps: list[StepRecord]
    params: dict[str, torch.Tensor]  # after the last optimizer step
    decisions: list[str] = field(default_factory=list)  # per step: plain | clipped | skipped


def run_reference(cfg: GPTConfig, microbatches: int, steps: int = 2,
                  train: TrainSpec | None = None, device: str | torch.device = "cpu"
                  ) -> ReferenceRun:
    """``device``: where to compute (the pipeline's device, so a GPU run is not checked
    against hours of CPU work); results come back on the CPU. ``train``: the optimizer and
    its step (default: SGD at the default learning rate, no clipping)."""
    train = train or TrainSpec()
    model = GPT(cfg).to(device)
    named = dict(model.named_parameters())
    opt = train.optimizer.make(named.values())
    records, decisions = [], []
    for step in range(steps):
        tokens, targets = make_batch(cfg, microbatches, step)
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(tokens.to(device)), targets.to(device))
        loss.backward()
        records.append(StepRecord(
            float(loss.detach()),
            {n: p.grad.detach().cpu().clone() for n, p in named.items()},
        ))
        decisions.append(reference_step(opt, named, train, step).label)
    params = {n: p.detach().cpu().clone() for n, p in named.items()}
    del model, opt
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return ReferenceRun(records, params, decisions)


@dataclass
class Comparison:
    """Largest relative differences; a tensor's difference is max|a - b| / max|b| (inf-norms).

    Relative to the tensor's scale rather than elementwise: summing microbatch gradients in a
    different order moves near-zero entries by a few ulps of the tensor's scale, which an
    elementwise ratio would blow up without any real disagreement.
    """

    max_rel: float
    worst: str
    checked: int
    missing: list[str]

    def ok(self, rtol: float) -> bool:
        return not self.missing and self.max_rel <= rtol


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    scale = float(b.abs().max()) if b.numel() else 0.0
    diff = float((a - b).abs().max()) if b.numel() else 0.0
    return diff / scale if scale > 0 else diff


def compare(run_steps: list[StepRecord], run_params: dict[str, torch.Tensor],
            ref: ReferenceRun) -> Comparison:
    worst, max_rel, checked, missing = "", 0.0, 0, []

    def consider(name: str, value: float) -> None:
        nonlocal worst, max_rel, checked
        checked += 1
        if value > max_rel or not worst:
            worst, max_rel = name, value

    for i, (got, want) in enumerate(zip(run_steps, ref.steps)):
        consider(f"step {i} loss", abs(got.loss - want.loss) / max(abs(want.loss), 1e-30))
        for name, g in want.grads.items():
            if name not in got.grads:
                missing.append(f"step {i} grad {name}")
                continue
            consider(f"step {i} grad {name}", rel_diff(got.grads[name], g))
    if len(run_steps) != len(ref.steps):
        missing.append(f"{len(run_steps)} steps run, {len(ref.steps)} in the reference")
    for name, p in ref.params.items():
        if name not in run_params:
            missing.append(f"param {name}")
            continue
        consider(f"param {name}", rel_diff(run_params[name], p))
    return Comparison(max_rel, worst, checked, missing)
