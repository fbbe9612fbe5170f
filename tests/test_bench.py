"""zbsolve bench: the cases are the issue's, built from the shipped instances, and judged right."""

from __future__ import annotations

import csv
from collections import Counter

import pytest
from conftest import INSTANCES, REFERENCE

from zbsolve.bench import (
    _shipped,
    _write,
    build_cases,
    draw_random_family,
    meets,
    random_family,
    run_case,
)


def test_cases_cover_the_issue_benchmark():
    cases = build_cases(REFERENCE)
    assert Counter(c.family for c in cases) == {
        "iclr-1p": 12, "iclr-2p": 12, "zbv": 9, "vmin": 9, "vhalf": 9, "small": 6, "large": 2,
        "chimera": 4, "dualpipe": 8, "dualpipev": 8, "segments": 2, "random": 30,
        "random-tight": 30}
    by_id = {c.id: c for c in cases}
    # the random multi-chunk family: <= 800 ops, several stages per device, every limit binds
    # somewhere between the least feasible and the unconstrained greedy's peak
    rand = [c for c in cases if c.family.startswith("random")]
    assert all(c.ops <= 800 and c.inst.chunks >= 2 and c.objective == "makespan" for c in rand)
    assert {c.inst.placement_kind for c in rand} >= {"v", "loop", "explicit"}
    assert all(x is not None for c in rand for x in c.inst.limit)
    assert by_id["iclr-1p/1.5b-p8-m24"].inst.limit == (8.0,) * 8
    assert by_id["iclr-2p/1.5b-p8-m24"].inst.limit == (16.0,) * 8
    assert by_id["vmin/p8-m16"].inst.limit == (8.0,) * 8
    assert by_id["large/28.3b-p32-m256-v2"].ops == 49152
    # anchor step time from the published bubble: T = m (F+I+W) / (1 - bubble)
    c = by_id["iclr-1p/1.5b-p8-m24"]
    assert c.anchor_time() == pytest.approx(24 * (18.52 + 18.09 + 9.34) / (1 - 0.1585))
    # the bidirectional families: limited to their own peak, anchored at their own makespan
    d = by_id["dualpipe/p4-m8"]
    assert d.inst.replicas == 2 and d.inst.limit == (6.8,) * 4
    assert d.anchor_time() == pytest.approx(399.07)


def test_the_shipped_random_family_is_what_its_generator_draws():
    """The benchmark reads the family from its files (drawing it takes 10-20 s); the published
    generator and seed must still give exactly those instances."""
    for tight in (False, True):
        drawn = [inst.to_dict() for inst in draw_random_family(tight=tight)]
        assert drawn == [inst.to_dict() for inst in random_family(tight=tight)], (
            "the draw changed: rewrite the files (bench.write_random_family) only if meant")


def test_a_shipped_instance_that_disagrees_with_its_row_is_refused():
    row = {"T_F": "18.52", "T_B": "18.09", "T_W": "9.99", "T_comm": "0.60"}
    with pytest.raises(ValueError, match="W = 9.34 but the reference row says 9.99"):
        _shipped(INSTANCES / "zb-iclr" / "1.5b-p8-m24.yaml", row)


def test_small_case_runs_and_meets_its_goal():
    case = next(c for c in build_cases(REFERENCE) if c.id == "small/teaching-p4-m8")
    row = run_case(case, workers=1, seed=0)
    assert row["status"] == "optimal" and row["value"] == 27.0
    assert meets(case, row)


def test_the_csv_keeps_the_proof_time_apart_from_the_solve_time(tmp_path):
    """Issue 18's "no regression" is about proofs; a solve also runs the memory phase after
    its proof, so the file carries both (results/bench/README.md)."""
    case = next(c for c in build_cases(REFERENCE) if c.id == "small/teaching-p4-m8")
    row = run_case(case, workers=1, seed=0)
    _write([row], tmp_path, "one", "zbsolve bench", "now", "idle", 1.0)
    with open(tmp_path / "one.csv", newline="", encoding="utf-8") as fh:
        (written,) = list(csv.DictReader(fh))
    proof, solve = float(written["proof_time"]), float(written["solve_time"])
    assert row["status"] == "optimal" and 0 <= proof <= solve
