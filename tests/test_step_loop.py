"""The closed loop's step modes: the step-boundary profile, the instance section per mode, which
pairs are compared (zbsolve.profiler.step_times, zbsolve.profiler.loop)."""

from __future__ import annotations

import pytest

from zbsolve.profiler.loop import LoopOptions, Planned, compared
from zbsolve.profiler.step_times import StepTimes, step_section

TIMES = StepTimes(step=(1.0, 2.0, 3.0, 4.0), norm=(0.125, 0.25, 0.5, 0.75),
                  snapshot=(0.5, 0.5, 1.0, 1.0))


def test_step_section_per_mode():
    v = (0, 1, 1, 0)  # two devices, V placement: device 0 holds stages 0 and 3
    sync = step_section(TIMES, "sync", v, comm=0.25)
    # the slowest device's local norms (0.125 + 0.75 on device 0; device 1: 0.25 + 0.5) plus
    # one small all-reduce hop
    assert sync == {"mode": "sync", "optimizer": [1.0, 2.0, 3.0, 4.0], "check": 1.125}
    post = step_section(TIMES, "post-validation", v, comm=0.25)
    assert post == {"mode": "post-validation", "optimizer": [1.625, 2.75, 4.5, 5.75]}
    with pytest.raises(ValueError, match="expected sync or post-validation"):
        step_section(TIMES, "none", v, comm=0.25)


def test_measured_step_times_cover_every_stage():
    pytest.importorskip("torch")
    from zbsolve.profiler.step_times import measure_step_times
    from zbsolve.runtime.model import GPTConfig

    cfg = GPTConfig.preset("gpt-tiny", layers=2, hidden=16, heads=2, seq=8, vocab=32)
    t = measure_step_times(cfg.to_dict(), 2, repeats=2, warmup=1)
    for values in (t.step, t.norm, t.snapshot):
        assert len(values) == 2 and all(v > 0 for v in values)


def _planned(layout: str, schedule: str, mode: str) -> Planned:
    return Planned(layout, schedule, 1, {}, 1.0, 0.0, 0.0, True, mode=mode)


def test_pairs_within_a_mode_or_one_schedule_across_modes():
    a, b = _planned("v1", "1f1b", "sync"), _planned("v1", "zb-h1", "sync")
    c = _planned("v1", "1f1b", "post-validation")
    assert compared(a, b) and compared(a, c) and not compared(b, c)
    assert c.label == "v1/1f1b/post-validation" and _planned("v1", "x", "none").label == "v1/x"


def test_loop_refuses_an_unknown_step_mode():
    with pytest.raises(ValueError, match="step_modes: expected distinct modes"):
        LoopOptions(step_modes=("sync", "async")).check()
    with pytest.raises(ValueError, match="step_modes"):
        LoopOptions(step_modes=("sync", "sync")).check()
