"""Memory sizes with units in instance files: one recorded unit, exact conversions, clear errors."""

from __future__ import annotations

import pytest
from conftest import make_instance

from zbsolve.instance import InstanceError, load_instance, memory_unit_label
from zbsolve.units import SizeError, convert, parse_size

BASE = {"devices": 2, "microbatches": 4, "times": {"F": 1, "I": 1, "W": 1}}


def inst(**memory):
    return load_instance({**BASE, "memory": memory})


def test_parse_size_reads_binary_and_decimal_units():
    assert parse_size("2GiB") == (2.0, "GiB")
    assert parse_size(" 512 MiB ") == (512.0, "MiB")
    assert parse_size("1e9B") == (1e9, "B")
    assert convert(80.0, "GB", "GiB") == pytest.approx(74.50580596923828)
    assert convert(1.0, "GiB", "MiB") == 1024.0
    for bad, words in (("2gib", "unknown memory unit 'gib'"), ("2", "has no unit"),
                       ("-2GiB", "cannot read"), ("GiB", "cannot read")):
        with pytest.raises(SizeError, match=words):
            parse_size(bad)


def test_sizes_are_converted_to_the_first_unit_and_recorded():
    i = inst(activation="1.5GiB", weight="512MiB", limit="80GB")
    assert i.memory_unit == "GiB"
    assert i.activation == (1.5, 1.5) and i.weight == (0.5, 0.5)
    assert i.limit == pytest.approx((80e9 / 2**30,) * 2)
    # the unit travels with the instance: to_dict, a round trip and with_() keep it
    assert i.to_dict()["memory"]["unit"] == "GiB"
    assert load_instance(i.to_dict()) == i
    assert i.with_(limit=(4.0, 4.0)).memory_unit == "GiB"
    assert i.with_(limit="8192MiB").limit == (8.0, 8.0)  # a size given to with_() is converted


def test_declared_unit_gives_plain_numbers_their_unit():
    i = inst(activation=1.5, weight=0.25, limit=["80GB", "40GiB"], unit="GiB")
    assert i.memory_unit == "GiB" and i.activation == (1.5, 1.5)
    assert i.limit == pytest.approx((80e9 / 2**30, 40.0))
    i = inst(activation="1GiB", limit="4GiB", unit="MiB")
    assert (i.activation, i.limit) == ((1024.0, 1024.0), (4096.0, 4096.0))


def test_plain_numbers_stay_unitless():
    i = make_instance(activation=1.0, limit=8)
    assert i.memory_unit is None and "unit" not in i.to_dict()["memory"]
    assert memory_unit_label(i) is None
    # a profiler's file names its unit in meta only: pictures still label it
    assert memory_unit_label(load_instance({**BASE, "meta": {"units": {"memory": "MiB"}}})) == "MiB"


@pytest.mark.parametrize("memory, message", [
    ({"activation": 1.0, "limit": "80GB"},
     "memory.activation: a plain number, but memory.limit is written with a unit"),
    ({"limit": "80GB"}, "memory.activation: required when memory is written with units"),
    ({"activation": "1GiB", "limit": ["8GiB", "9XB"]},
     "memory.limit[1]: unknown memory unit 'XB'; expected one of B, KiB, MiB, GiB"),
    ({"activation": "1GiB", "unit": "gb"}, "memory.unit: unknown memory unit 'gb'"),
    ({"activation": "1GiB", "unit": 3}, "memory.unit: expected a unit name"),
    ({"activation": "one GiB"}, "memory.activation: cannot read 'one GiB' as a size"),
    ({"activation": "1GiB", "weight": "2GiB"}, "memory.weight[0]: 2.0 exceeds"),
    ({"activation": "1GiB", "limit": "0GiB"}, "memory.limit[0]: must be > 0"),
])
def test_bad_sizes_are_one_line_naming_the_field(memory, message):
    with pytest.raises(InstanceError) as err:
        inst(**memory)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_file_with_units_loads_and_names_the_file(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("devices: 2\nmicrobatches: 4\ntimes: {F: 1, I: 1, W: 1}\n"
                    "memory: {activation: 2GiB, weight: 1GiB, limit: 80GB}\n")
    assert load_instance(path).memory_unit == "GiB"
    path.write_text("devices: 2\nmicrobatches: 4\ntimes: {F: 1, I: 1, W: 1}\n"
                    "memory: {activation: 2GiB, limit: 80Gb}\n")
    with pytest.raises(InstanceError, match=r"gpu.yaml: memory.limit: unknown memory unit 'Gb'"):
        load_instance(path)


def test_memory_margin_keeps_a_share_of_every_limit_free():
    i = inst(activation="1GiB", limit=["8GiB", "4GiB"])
    kept = i.with_memory_margin(0.25)
    assert kept.limit == (6.0, 3.0) and kept.memory_unit == "GiB"
    assert kept.extra["meta"]["memory_margin"] == {"fraction": 0.25, "limit_before": [8.0, 4.0]}
    assert i.with_memory_margin(0) is i
    assert make_instance(limit=None).with_memory_margin(0.5).limit == (None,) * 4
    for bad in (1.0, -0.1, True, "0.1"):
        with pytest.raises(InstanceError, match="memory margin: expected a fraction in"):
            i.with_memory_margin(bad)
