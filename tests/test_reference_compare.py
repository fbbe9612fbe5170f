"""The gradient proof's comparison (runtime/reference.py compare): it passes only on finite
numbers of the right shape that agree, and names the tensor when it fails."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from zbsolve.cli.run import verdict_line  # noqa: E402
from zbsolve.runtime.reference import (  # noqa: E402
    Comparison,
    ReferenceRun,
    StepRecord,
    compare,
    rel_diff,
)


def _ref(steps: int = 2) -> ReferenceRun:
    f64 = torch.float64  # exact differences below
    g = {"w": torch.tensor([1.0, -2.0, 4.0], dtype=f64), "b": torch.tensor([0.5], dtype=f64)}
    return ReferenceRun([StepRecord(2.0 + i, {k: v * (i + 1) for k, v in g.items()})
                         for i in range(steps)],
                        {"w": torch.tensor([3.0, 3.0, -6.0], dtype=f64),
                         "b": torch.tensor([1.0], dtype=f64)})


def _copy(ref: ReferenceRun):
    steps = [StepRecord(s.loss, {k: v.clone() for k, v in s.grads.items()}) for s in ref.steps]
    return steps, {k: v.clone() for k, v in ref.params.items()}


def test_identical_run_passes_and_counts_every_tensor_exactly():
    ref = _ref()
    steps, params = _copy(ref)
    cmp = compare(steps, params, ref)
    # 2 steps x (1 loss + 2 grads) + 2 final params
    assert (cmp.checked, cmp.max_rel, cmp.missing, cmp.nonfinite, cmp.mismatched) == (8, 0.0, [], [], [])
    assert cmp.ok(0.0) and cmp.ok(1e-5)


def test_the_worst_relative_difference_is_kept_and_judged():
    ref = _ref()
    steps, params = _copy(ref)
    steps[1].grads["w"][2] += 0.008  # scale of step 1's w is max|2*[1,-2,4]| = 8 -> 1e-3
    params["b"][0] -= 1e-6  # 1e-6 relative
    steps[0].loss = 2.0 * (1 - 1e-4)  # 1e-4 relative, below the grad's difference
    cmp = compare(steps, params, ref)
    assert cmp.worst == "step 1 grad w"
    assert cmp.max_rel == pytest.approx(1e-3)
    assert not cmp.ok(0.999e-3) and cmp.ok(1.001e-3)


def test_sign_matters_relative_difference_uses_abs():
    ref = _ref(1)
    steps, params = _copy(ref)
    steps[0].grads["w"] = -steps[0].grads["w"]
    cmp = compare(steps, params, ref)
    assert cmp.worst == "step 0 grad w" and cmp.max_rel == pytest.approx(2.0)
    steps, params = _copy(ref)
    steps[0].loss = -2.0
    assert compare(steps, params, ref).max_rel == pytest.approx(2.0)
    assert rel_diff(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 0.0])) == pytest.approx(2.0)
    assert rel_diff(torch.tensor([1e-3]), torch.tensor([0.0])) == pytest.approx(1e-3)
    assert rel_diff(torch.tensor([]), torch.tensor([])) == 0.0


@pytest.mark.parametrize("where", ["loss", "grad", "param", "ref-loss", "ref-grad", "ref-param"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_on_either_side_fails_and_names_the_tensor(where, bad):
    ref = _ref()
    steps, params = _copy(ref)
    if where == "loss":
        steps[1].loss = bad
    elif where == "grad":
        steps[0].grads["b"][0] = bad
    elif where == "param":
        params["w"][1] = bad
    elif where == "ref-loss":
        ref.steps[1].loss = bad
    elif where == "ref-grad":
        ref.steps[0].grads["b"][0] = bad
    else:
        ref.params["w"][1] = bad
    cmp = compare(steps, params, ref)
    name = {"loss": "step 1 loss", "grad": "step 0 grad b", "param": "param w"}[
        where.removeprefix("ref-")]
    side = "reference" if where.startswith("ref-") else "run"
    assert cmp.nonfinite == [f"{name} (in the {side})"]
    assert not cmp.ok(1e9) and not cmp.ok(math.inf)
    assert cmp.checked == 8 and math.isfinite(cmp.max_rel)


def test_nan_everywhere_fails_like_lr_nan_would():
    ref = _ref()
    steps, params = _copy(ref)
    for s in (*steps, *ref.steps):
        s.loss = math.nan
    cmp = compare(steps, params, ref)
    assert cmp.nonfinite == ["step 0 loss (in the run and the reference)",
                             "step 1 loss (in the run and the reference)"]
    assert not cmp.ok(1.0)


def test_wrong_shape_missing_and_unexpected_tensors_fail():
    ref = _ref()
    steps, params = _copy(ref)
    steps[0].grads["w"] = torch.tensor([1.0, -2.0, 4.0, 0.0])  # broadcasting must not hide it
    steps[1].grads["b"] = torch.tensor([[1.0]])
    del params["b"]
    steps[1].grads.pop("w")
    params["extra"] = torch.zeros(1)
    cmp = compare(steps, params, ref)
    assert cmp.mismatched == ["step 0 grad w: shape (4,), reference (3,)",
                              "step 1 grad b: shape (1, 1), reference (1,)",
                              "param extra: not in the reference"]
    assert cmp.missing == ["step 1 grad w", "param b"]
    assert not cmp.ok(1e9)
    assert cmp.checked == 4  # 2 losses, step 0 grad b, param w: nothing else is compared
    assert cmp.problems()[0] == "missing step 1 grad w"


def test_missing_steps_fail():
    ref = _ref()
    steps, params = _copy(ref)
    cmp = compare(steps[:1], params, ref)
    assert cmp.missing == ["1 steps run, 2 in the reference"] and not cmp.ok(1.0)
    assert cmp.checked == 5
    extra = compare(steps + steps[:1], params, ref)
    assert extra.missing == ["3 steps run, 2 in the reference"] and not extra.ok(1.0)


def test_comparison_ok_needs_a_real_tolerance():
    cmp = Comparison(1e-6, "param w", 3, [])
    assert cmp.ok(1e-6) and not cmp.ok(9e-7) and not cmp.ok(math.nan)


def _report(cmp: Comparison, rtol: float = 1e-5) -> dict:
    return {"checked": cmp.checked, "steps": 2, "ok": cmp.ok(rtol), "max_rel_diff": cmp.max_rel,
            "rtol": rtol, "worst": cmp.worst, "missing": cmp.missing,
            "nonfinite": cmp.nonfinite, "mismatched": cmp.mismatched}


def test_verdict_line_says_why():
    ref = _ref()
    steps, params = _copy(ref)
    assert _report(compare(steps, params, ref))["ok"]
    assert verdict_line(_report(compare(steps, params, ref))).startswith(
        "PASS: loss, gradients and parameters over 2 step(s) (8 tensors")
    steps[0].loss = math.nan
    line = verdict_line(_report(compare(steps, params, ref)))
    assert line.startswith("FAIL:") and "non-finite values (NaN or inf) in step 0 loss (in the run)" in line
    steps, params = _copy(ref)
    steps[0].grads["w"] = torch.zeros(2)
    line = verdict_line(_report(compare(steps, params, ref)))
    assert "mismatched step 0 grad w: shape (2,), reference (3,)" in line
    steps, params = _copy(ref)
    params["w"] *= 2
    line = verdict_line(_report(compare(steps, params, ref)))
    assert line.endswith("largest relative difference 1 > rtol 1e-05 at param w")


# ------------------------------------------------------------------ the reference run itself
def test_reference_run_is_plain_sgd_on_the_unsplit_model():
    from zbsolve.runtime.model import GPTConfig

    cfg = GPTConfig.preset("gpt-tiny", layers=2, hidden=16, heads=2, seq=8, vocab=32,
                           microbatch_size=2)
    lr, m = 0.1, 3
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: CPU time stays close to wall time (mutmut's limit)
    try:
        _replay_reference(cfg, lr, m)
    finally:
        torch.set_num_threads(threads)


def _replay_reference(cfg, lr, m):
    from zbsolve.runtime.model import GPT, lm_loss, make_batch
    from zbsolve.runtime.reference import DEFAULT_LR, make_optimizer, run_reference

    ref = run_reference(cfg, m, steps=2, lr=lr)
    assert len(ref.steps) == 2
    # an independent replay: same model, same batches, one SGD step by hand after each backward
    model = GPT(cfg)
    names = [n for n, _ in model.named_parameters()]
    assert sorted(ref.params) == sorted(names) and sorted(ref.steps[0].grads) == sorted(names)
    for step in range(2):
        tokens, targets = make_batch(cfg, m, step)
        model.zero_grad(set_to_none=True)
        loss = lm_loss(model(tokens), targets)
        loss.backward()
        assert ref.steps[step].loss == pytest.approx(float(loss.detach()), rel=1e-6)
        for n, p in model.named_parameters():
            assert torch.allclose(ref.steps[step].grads[n], p.grad, rtol=1e-4, atol=1e-7), (step, n)
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    for n, p in model.named_parameters():
        assert torch.allclose(ref.params[n], p.detach(), rtol=0, atol=1e-6), n
    assert ref.steps[0].loss != ref.steps[1].loss  # the step moved the parameters
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(1))])
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["lr"] == DEFAULT_LR == 0.05
    assert opt.param_groups[0]["momentum"] == 0 and opt.param_groups[0]["weight_decay"] == 0
    assert make_optimizer([torch.nn.Parameter(torch.zeros(1))], lr=0.2).param_groups[0]["lr"] == 0.2


def test_worst_is_the_first_largest_and_empty_compares_nothing():
    ref = _ref()
    steps, params = _copy(ref)
    cmp = compare(steps, params, ref)
    assert cmp.worst == "step 0 loss"  # a tie keeps the first tensor, not the last
    empty = compare([], {}, ReferenceRun([], {}))
    assert (empty.max_rel, empty.worst, empty.checked, empty.missing) == (0.0, "", 0, [])
    assert empty.ok(0.0)


def test_relative_difference_below_unit_scale():
    assert rel_diff(torch.tensor([0.6], dtype=torch.float64),
                    torch.tensor([0.5], dtype=torch.float64)) == pytest.approx(0.2)
    ref = _ref(1)
    ref.steps[0].loss = 0.5
    steps, params = _copy(ref)
    steps[0].loss = 0.501
    assert compare(steps, params, ref).max_rel == pytest.approx(2e-3)


def test_non_finite_tensor_on_both_sides_says_both():
    ref = _ref(1)
    steps, params = _copy(ref)
    steps[0].grads["w"][0] = math.nan
    ref.steps[0].grads["w"][0] = math.inf
    assert compare(steps, params, ref).nonfinite == ["step 0 grad w (in the run and the reference)"]


def test_reference_takes_the_train_spec_and_records_each_steps_decision():
    from zbsolve.runtime.model import GPTConfig
    from zbsolve.runtime.optim import OptimizerSpec, TrainSpec
    from zbsolve.runtime.reference import run_reference

    cfg = GPTConfig.preset("gpt-tiny", layers=1, hidden=8, heads=2, seq=4, vocab=16,
                           microbatch_size=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plain = run_reference(cfg, 1, steps=2)
        assert plain.decisions == ["plain", "plain"]
        name = next(iter(plain.params))
        spec = TrainSpec(OptimizerSpec("sgd", 0.05, clip=1e-3), inject_inf=(1, name))
        judged = run_reference(cfg, 1, steps=2, train=spec)
        assert judged.decisions == ["clipped", "skipped"]  # tiny clip; an Inf skips the step
        assert judged.steps[0].loss == plain.steps[0].loss  # same start, same batch
        assert not torch.equal(judged.params[name], plain.params[name])
        same = run_reference(cfg, 1, steps=2, train=TrainSpec(OptimizerSpec("sgd", 0.05)))
        assert all(torch.equal(same.params[n], p) for n, p in plain.params.items())
        with pytest.raises(ValueError) as err:
            run_reference(cfg, 1, train=spec, lr=0.1)
        assert str(err.value) == ("run_reference: give the learning rate in train.optimizer, "
                                  "not lr too")
    finally:
        torch.set_num_threads(threads)


def test_reference_computes_on_the_device_given(monkeypatch):
    """The model and each batch go to ``device`` (a GPU run's reference is computed there):
    on a CPU-only machine the moves are recorded, since any device here is the CPU."""
    from zbsolve.runtime.model import GPTConfig
    from zbsolve.runtime.reference import run_reference

    cfg = GPTConfig.preset("gpt-tiny", layers=1, hidden=8, heads=2, seq=4, vocab=16,
                           microbatch_size=1)
    moves = []
    module_to, tensor_to = torch.nn.Module.to, torch.Tensor.to

    def record_module(self, *args, **kw):
        moves.append(("model", args))
        return module_to(self, *args, **kw)

    def record_tensor(self, *args, **kw):
        moves.append(("tensor", args))
        return tensor_to(self, *args, **kw)

    dev = torch.device("cpu", 0)
    monkeypatch.setattr(torch.nn.Module, "to", record_module)
    monkeypatch.setattr(torch.Tensor, "to", record_tensor)
    run_reference(cfg, 1, steps=1, device=dev)
    monkeypatch.undo()
    assert [args for what, args in moves if what == "model"] == [(dev,)]
    # the tokens and the targets (the model's own move passes each parameter three arguments)
    assert [args for what, args in moves if what == "tensor" and len(args) == 1] == [(dev,), (dev,)]
