"""Per-segment F, I, W and memory of the runner's GPT at a given segment count and split.

The stages are the runner's (:func:`zbsolve.runtime.model.build_stage_modules`) driven through
the runner's :class:`~zbsolve.runtime.segmented.SegmentedStageRunner`, so what is timed is what
a segmented table later runs. One sample is one microbatch: the forwards of segments 0..k-1
(each attending over the cached keys and values of the earlier ones), then the input backwards
k-1..0 (each sending the gradients of those keys and values back), then the weight backwards;
each op is timed on its own, the first ``warmup`` samples are discarded.

Memory per segment is the runner's count of what its forward saved for the backward (its keys
and values included, plus, with the dense attention of the CPU, the copy of the prefix keys and
values it attended over) and of what its I kept for W; ``kv_bytes`` is the size of its own keys
and values, which live until its I, after every later segment's.
"""

from __future__ import annotations

from functools import partial

import torch

from zbsolve.profiler.records import SegmentProfile
from zbsolve.profiler.timing import Spread, Stopwatch, check_counts
from zbsolve.runtime.iw_split import MemoryTracker
from zbsolve.runtime.model import GPTConfig, build_stage_modules, layer_split, lm_loss
from zbsolve.runtime.segmented import SegmentedStageRunner
from zbsolve.segments import SegmentModel


def runner_shape(cfg: GPTConfig, n_stages: int) -> SegmentModel:
    """The runner's GPT as the cost model sees it (dense attention: what its kernel computes)."""
    return SegmentModel(seq=cfg.seq, hidden=cfg.hidden, heads=cfg.heads, vocab=cfg.vocab,
                        layers=tuple(len(r) for r in layer_split(cfg.layers, n_stages)),
                        attention="dense")


def profile_segments(cfg: GPTConfig, n_stages: int, microbatches: int,
                     lengths: tuple[int, ...], *, warmup: int = 3, repeats: int = 10,
                     device: torch.device | None = None, clock: str = "wall"
                     ) -> list[SegmentProfile]:
    """Profile every segment of every stage of ``cfg`` split into ``n_stages``."""
    check_counts(repeats, warmup)
    if sum(lengths) != cfg.seq or min(lengths) < 1:
        raise ValueError(f"segment lengths {list(lengths)}: expected token counts >= 1 summing to "
                         f"the model's seq ({cfg.seq})")
    device = device or torch.device("cpu")
    watch = Stopwatch(cuda=device.type == "cuda", clock=clock)
    k, b, h = len(lengths), cfg.microbatch_size, cfg.hidden
    out = []
    for s, module in enumerate(build_stage_modules(cfg, n_stages)):
        runner = SegmentedStageRunner(module.to(device), s, n_stages, lm_loss, 1.0 / microbatches,
                                      MemoryTracker(), lengths)
        gen = torch.Generator().manual_seed(2000 + s)
        times: dict[str, list[list[float]]] = {kind: [[] for _ in range(k)] for kind in "FIW"}
        saved, held = [[] for _ in range(k)], [[] for _ in range(k)]
        for i in range(warmup + repeats):
            keep = i >= warmup
            for g, n in enumerate(lengths):
                x = (torch.randint(0, cfg.vocab, (b, n), generator=gen) if runner.is_first
                     else torch.randn(b, n, h, generator=gen)).to(device)
                tgt = (torch.randint(0, cfg.vocab, (b, n), generator=gen).to(device)
                       if runner.is_last else None)
                t, _ = watch.time(partial(runner.forward, i, x, tgt, seg=g))
                if keep:
                    times["F"][g].append(t)
                    saved[g].append(runner.pending[(i, g)].saved_bytes)
            for g in reversed(range(k)):
                grad = (None if runner.is_last
                        else (torch.randn(b, lengths[g], h, generator=gen) * 1e-3).to(device))
                t, _ = watch.time(partial(runner.backward_input, i, grad, seg=g))
                if keep:
                    times["I"][g].append(t)
                    held[g].append(runner.pending[(i, g)].held_bytes)
            for g in range(k):
                t, _ = watch.time(partial(runner.backward_weight, i, seg=g))
                if keep:
                    times["W"][g].append(t)
        module.zero_grad(set_to_none=True)
        out.append(SegmentProfile(
            stage=s, lengths=tuple(lengths),
            F=tuple(Spread.of(x) for x in times["F"]), I=tuple(Spread.of(x) for x in times["I"]),
            W=tuple(Spread.of(x) for x in times["W"]),
            saved_bytes=tuple(Spread.of(x).median for x in saved),
            held_bytes=tuple(Spread.of(x).median for x in held),
            kv_bytes=tuple(float(runner.kv_bytes[g]) for g in range(k))))
    return out
