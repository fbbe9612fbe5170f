"""The instance loader accepts the documented schema and rejects bad input, naming the field."""

from __future__ import annotations

import pytest
from conftest import INSTANCES, make_instance

from zbsolve.instance import InstanceError, load_instance


def base(**over):
    data = {"devices": 4, "microbatches": 8, "times": {"F": 1, "I": 1, "W": 1}}
    data.update(over)
    return data


def test_defaults_and_derived_fields():
    inst = load_instance(base())
    assert (inst.p, inst.m, inst.v, inst.stages) == (4, 8, 1, 4)
    assert inst.placement == (0, 1, 2, 3)
    assert inst.F == (1.0,) * 4 and inst.comm == 0.0
    assert inst.activation == (1.0,) * 4 and inst.weight == (0.0,) * 4
    assert inst.limit == (None,) * 4
    assert inst.device_work(0) == 8 * 3
    assert inst.duration("B", 2) == 2.0


def test_loop_and_v_placements():
    assert make_instance(p=4, v=2).placement == (0, 1, 2, 3, 0, 1, 2, 3)
    assert make_instance(p=4, v=2, placement="v").placement == (0, 1, 2, 3, 3, 2, 1, 0)
    assert make_instance(p=3, v=3, placement="v").placement == (0, 1, 2, 2, 1, 0, 0, 1, 2)


def test_per_stage_lists_and_explicit_placement():
    inst = load_instance(base(chunks=2, placement=[0, 1, 2, 3, 3, 2, 1, 0],
                              times={"F": [1, 2, 3, 4, 5, 6, 7, 8], "I": 1, "W": 0.5}))
    assert inst.placement_kind == "explicit"
    assert inst.F[7] == 8.0 and inst.stages_of(0) == [0, 7]
    assert inst.hop(3, 4) == 0.0


def test_round_trip(tmp_path):
    inst = make_instance(p=3, m=5, v=2, placement="v", F=[1, 2, 3, 4, 5, 6], comm=0.5,
                         weight=0.4, limit=[4, 5, 6])
    for suffix in (".yaml", ".json"):
        path = tmp_path / f"x{suffix}"
        inst.dump(path)
        assert load_instance(path) == inst


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"times": {"F": -1, "I": 1, "W": 1}}, "times.F[0]: must be > 0"),
        ({"times": {"F": 0, "I": 1, "W": 1}}, "times.F[0]: must be > 0"),
        ({"times": {"F": [1, 2], "I": 1, "W": 1}}, "times.F: expected one number per logical stage (4)"),
        ({"times": {"F": 1, "I": 1}}, "times: missing ['W']"),
        ({"times": {"F": 1, "I": 1, "W": 1, "B": 2}}, "times: unknown key(s) ['B']"),
        ({"placement": [0, 1, 2, 4]}, "placement[3]: device id must be an integer in [0, 3]"),
        ({"placement": [0, 1, 1, 0]}, "placement: device(s) [2, 3] hold no stage"),
        ({"placement": [0, 1, 2]}, "one device per logical stage"),
        ({"placement": "zigzag"}, "placement: expected 'loop', 'v'"),
        ({"memory": {"activation": 1, "weight": 2}}, "memory.weight[0]: 2.0 exceeds memory.activation[0]"),
        ({"memory": {"limit": [1, 2]}}, "memory.limit: expected one number per device (4)"),
        ({"memory": {"budget": 3}}, "memory: unknown key(s) ['budget']"),
        ({"devices": 0}, "devices: expected an integer >= 1"),
        ({"microbatches": 2.5}, "microbatches: expected an integer >= 1"),
        ({"comm": -0.1}, "comm: expected a number >= 0"),
        ({"layers": 3}, "unknown key(s) ['layers']"),
    ],
)
def test_bad_input_names_the_field(over, needle):
    with pytest.raises(InstanceError) as err:
        load_instance(base(**over))
    assert needle in str(err.value)


def test_file_errors(tmp_path):
    with pytest.raises(InstanceError, match="does not exist"):
        load_instance(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: 4\nmicrobatches: 8\ntimes: {F: 1, I: 1, W: -2}\n")
    with pytest.raises(InstanceError, match=r"bad.yaml: times.W\[0\]"):
        load_instance(bad)


def test_every_shipped_instance_loads():
    paths = sorted(INSTANCES.rglob("*.yaml"))
    assert paths, "no shipped instances"
    for path in paths:
        inst = load_instance(path)
        assert inst.stages == inst.p * inst.v
