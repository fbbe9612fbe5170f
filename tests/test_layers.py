"""The per-layer cost profile: stage sums, instances from a split, strict input."""

from __future__ import annotations

import pytest

from zbsolve.layers import GIB, LayerCost, LayerProfile, LayerProfileError


def _profile(n=6) -> LayerProfile:
    layers = [LayerCost(f"layers.{i}", F=1.0 + i, I=2.0, W=0.5, activation=GIB, weight=GIB / 4,
                        params=100.0, boundary=10.0 * i) for i in range(n)]
    return LayerProfile(tuple(layers), source="test", meta={"model": "toy"})


def test_stage_sums_follow_the_split():
    prof = _profile()
    stages = prof.stages([1, 2, 3])
    assert [s.F for s in stages] == [1.0, 2.0 + 3.0, 4.0 + 5.0 + 6.0]
    assert [s.params for s in stages] == [100.0, 200.0, 300.0]
    assert [s.boundary for s in stages] == [0.0, 20.0, 50.0]  # the block's last layer
    assert stages[1].name == "layers.1+layers.2"


def test_to_instance_sums_times_and_memory_in_gib():
    inst = _profile().to_instance([2, 2, 1, 1], devices=2, microbatches=4, chunks=2,
                                  placement="v", comm=0.1, limit_gib=8.0)
    assert inst.F == (3.0, 7.0, 5.0, 6.0)
    assert inst.activation == (2.0, 2.0, 1.0, 1.0)
    assert inst.weight == (0.5, 0.5, 0.25, 0.25)
    assert inst.placement == (0, 1, 1, 0)
    assert inst.extra["meta"]["split"] == [2, 2, 1, 1]


@pytest.mark.parametrize("split, why", [
    ([3, 2], "covers 5 layers"), ([0, 6], "split[0]"), ([3.0, 3], "split[0]"),
])
def test_bad_splits_are_rejected(split, why):
    with pytest.raises(LayerProfileError, match=why.replace("[", r"\[").replace("]", r"\]")):
        _profile().stages(split)


def test_bad_costs_are_rejected():
    with pytest.raises(LayerProfileError, match="F must be a finite number"):
        LayerCost("x", F=float("nan"), I=1, W=1, activation=1)
    with pytest.raises(LayerProfileError, match="weight 2 exceeds activation 1"):
        LayerCost("x", F=1, I=1, W=1, activation=1, weight=2)


def test_round_trip(tmp_path):
    prof = _profile(3)
    path = tmp_path / "p.json"
    prof.dump(path)
    assert LayerProfile.load(path) == prof
    path.write_text('{"format": "zbsolve-layers", "version": 1, "layers": [{"name": "a"}]}')
    with pytest.raises(LayerProfileError, match=r"layers\[0\]"):
        LayerProfile.load(path)
