"""The prefix cost model against a direct FLOP count of the runner's segmented GPT
(``torch.utils.flop_counter``), F, I and W separately, per segment and per stage."""

from __future__ import annotations

from functools import partial

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from zbsolve.runtime.iw_split import MemoryTracker  # noqa: E402
from zbsolve.runtime.model import GPTConfig, build_stage_modules, lm_loss  # noqa: E402
from zbsolve.runtime.segmented import SegmentedStageRunner  # noqa: E402
from zbsolve.segments import SegmentModel, bounds_of, stage_flops  # noqa: E402

pytestmark = pytest.mark.torch


def counted(fn) -> int:
    """Matmul FLOPs of ``fn``, attention included: torch's CPU flash kernel has no FLOP formula
    in the counter, so attention runs on the math backend, whose matmuls the counter sees."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("lengths", [(16,), (5, 7, 4)])
def test_formula_equals_the_counted_flops_of_the_runner_model(lengths):
    """The runner's CPU attention is dense over the prefix (every query of the segment against
    all keys up to the segment's end), so ``attention: dense`` is its exact count; the default
    ``causal`` differs only in the pairs counted (tests/test_segments.py)."""
    cfg = GPTConfig(layers=3, hidden=32, heads=4, seq=16, vocab=64, microbatch_size=2)
    n_stages = 2
    shape = SegmentModel(seq=cfg.seq, hidden=cfg.hidden, layers=(2, 1), heads=cfg.heads,
                         vocab=cfg.vocab, attention="dense")
    gen = torch.Generator().manual_seed(0)
    for stage, module in enumerate(build_stage_modules(cfg, n_stages)):
        runner = SegmentedStageRunner(module, stage, n_stages, lm_loss, 1.0, MemoryTracker(),
                                      tuple(lengths))
        last = stage == n_stages - 1
        got: dict[str, list[int]] = {"F": [], "I": [], "W": []}
        for g, n in enumerate(lengths):
            x = (torch.randint(0, cfg.vocab, (2, n), generator=gen) if stage == 0
                 else torch.randn(2, n, cfg.hidden, generator=gen))
            tgt = torch.randint(0, cfg.vocab, (2, n), generator=gen) if last else None
            got["F"].append(counted(partial(runner.forward, 0, x, tgt, seg=g)))
        for g in reversed(range(len(lengths))):
            grad = None if last else torch.randn(2, lengths[g], cfg.hidden, generator=gen)
            got["I"].insert(0, counted(partial(runner.backward_input, 0, grad, seg=g)))
        for g in range(len(lengths)):
            got["W"].append(counted(partial(runner.backward_weight, 0, seg=g)))
        want = [stage_flops(shape, stage, a, b) for a, b in bounds_of(lengths)]
        for kind in "FIW":
            assert got[kind] == [cfg.microbatch_size * w[kind] for w in want], (stage, kind)
