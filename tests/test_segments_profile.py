"""The profiler measures per-segment F, I, W and memory of the runner's GPT at a given k and
split, and writes an instance with per-segment tables that the solver and the runner take."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from zbsolve.instance import load_instance  # noqa: E402
from zbsolve.profiler import profile  # noqa: E402
from zbsolve.profiler.writer import instance_dict  # noqa: E402
from zbsolve.runtime.model import GPTConfig  # noqa: E402

pytestmark = pytest.mark.torch


def test_profile_per_segment_figures_and_instance():
    cfg = GPTConfig.preset("gpt-tiny", layers=2, hidden=32, heads=4, seq=16, vocab=64)
    run = profile(cfg, devices=1, chunks=2, microbatches=2, repeats=2, warmup=1, segments=2,
                  segment_lengths=[10, 6])
    assert [sp.lengths for sp in run.segments] == [(10, 6), (10, 6)]
    b, h = cfg.microbatch_size, cfg.hidden
    for sp in run.segments:
        assert sp.kv_bytes == (2 * b * 10 * h * 4, 2 * b * 6 * h * 4)  # own keys and values
        assert all(x.median > 0 for x in (*sp.F, *sp.I, *sp.W))
        assert min(sp.saved_bytes) > max(sp.kv_bytes)  # K/V are part of the activation
    inst = load_instance(instance_dict(run))
    assert inst.segments == 2 and inst.segment_lengths == (10.0, 6.0)
    # the writer rounds times to 6 decimals (profiler/writer.py): off by up to 5e-7, whatever
    # the time (a relative 1e-6 failed on a median of 0.4967555, written as 0.496755)
    assert inst.duration("F", 1, 1) == pytest.approx(run.segments[1].F[1].median, abs=6e-7)
    assert inst.segment_memory(0, 0)[0] * 2**20 == pytest.approx(
        max(run.segments[0].saved_bytes[0], run.segments[0].held_bytes[0]), rel=1e-3)
    assert inst.segment_model is not None and inst.segment_model.attention == "dense"
    with pytest.raises(ValueError, match="--segment-lengths: expected 2 lengths"):
        profile(cfg, devices=1, chunks=2, microbatches=2, repeats=1, warmup=0, segments=2,
                segment_lengths=[16])
