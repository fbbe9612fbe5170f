"""The layer split: the rules people use, the split bounds (valid, exact minimum), enumeration."""

from __future__ import annotations

import itertools
import math

import pytest

from zbsolve.layers import GIB, LayerCost, LayerProfile
from zbsolve.plan.rules import RuleError, even_split, torchtitan_split, zero_bubble_split
from zbsolve.plan.split_search import SplitProblem


def _profile(n_blocks=6, head=3.0) -> LayerProfile:
    """An embedding (no I), blocks of F=1, I=1, W=0.5 with a little spread, and a heavy head."""
    layers = [LayerCost("tok_embeddings", F=0.1, I=0.0, W=0.2, activation=0.01 * GIB,
                        weight=0.01 * GIB, params=GIB)]
    layers += [LayerCost(f"layers.{i}", F=1.0 + 0.05 * (i % 3), I=1.0, W=0.5,
                         activation=0.1 * GIB, weight=0.05 * GIB, params=0.5 * GIB)
               for i in range(n_blocks)]
    layers.append(LayerCost("norm+output", F=head, I=head, W=head / 2, activation=0.3 * GIB,
                            weight=0.2 * GIB, params=GIB))
    return LayerProfile(tuple(layers), meta={"model": "toy"})


def _all_splits(n: int, S: int):
    for cuts in itertools.combinations(range(1, n), S - 1):
        bounds = (0, *cuts, n)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def test_torchtitan_rule_counts_embedding_and_head_as_a_layer_each():
    assert torchtitan_split(32, 8) == [5, 5, 4, 4, 4, 4, 4, 4]  # emb+4, 5, 4.., 3+head
    assert torchtitan_split(6, 3) == [3, 3, 2]  # torchtitan's own example: 8 // 3, 2 extra
    assert torchtitan_split(4, 2, 2, 2) == [3, 3]  # weights 2: emb + 2 blocks | 2 + head
    with pytest.raises(RuleError, match="cannot fill"):
        torchtitan_split(1, 4)


def test_zero_bubble_rule_pads_to_k_p_and_drops_from_last_then_first():
    assert zero_bubble_split(32, 8) == [5, 4, 4, 4, 4, 4, 4, 5]  # p | L: even
    assert zero_bubble_split(30, 8) == [4] * 8  # L = 4p - 2: first and last one block less
    assert zero_bubble_split(29, 8) == [4, 3, 4, 4, 4, 4, 4, 4]  # then the second stage
    assert zero_bubble_split(32, 8, 2) == [3] + [2] * 14 + [3]
    with pytest.raises(RuleError, match="do not split into 3 chunks"):
        zero_bubble_split(32, 8, 3)
    assert even_split(10, 4) == [4, 3, 2, 3]


def test_bound_is_below_the_solved_optimum_of_every_split():
    from zbsolve.solver import SolveOptions, solve

    prob = SplitProblem(_profile(4), devices=2, microbatches=4, comm=0.05)
    checked = 0
    for split in _all_splits(len(prob.profile), 2):
        bound = prob.bound(split)
        if not math.isfinite(bound):
            continue  # the embedding alone has no I: not an instance
        res = solve(prob.instance(split), SolveOptions(time_limit=10, workers=1, seed=0))
        assert res.status == "optimal"
        assert bound <= res.objective_value + 1e-9, split
        checked += 1
    assert checked == 4


def test_enumeration_is_exhaustive_below_its_cutoff():
    prob = SplitProblem(_profile(6), devices=2, chunks=2, placement="v", microbatches=8,
                        comm=0.1)
    everything = sorted((prob.bound(s), s) for s in _all_splits(len(prob.profile), 4))
    finite = [bs for bs in everything if math.isfinite(bs[0])]
    cutoff = finite[len(finite) // 3][0]
    found, complete = prob.enumerate_splits(cutoff)
    assert complete
    assert sorted(found) == [bs for bs in finite if bs[0] <= cutoff]
    capped, complete = prob.enumerate_splits(cutoff, max_results=2)
    assert not complete and len(capped) == 2


def test_min_bound_is_the_exact_minimum_over_all_splits():
    for devices, chunks, placement in ((3, 1, "loop"), (2, 2, "loop"), (2, 2, "v")):
        prob = SplitProblem(_profile(7), devices=devices, chunks=chunks, placement=placement,
                            microbatches=6, comm=0.05)
        brute = min(prob.bound(s) for s in _all_splits(len(prob.profile), prob.stages))
        lower, split = prob.min_bound(time_limit=10)
        slack = (2 * 6 * chunks + 2) / 1000  # the bound model's rounding allowance, in ms
        assert brute - slack - 1e-3 <= lower <= brute + 1e-9
        assert prob.bound(split) == pytest.approx(brute, abs=1e-2)


def test_memory_makes_splits_infeasible_and_the_bound_model_knows():
    prof = _profile(6)
    # usable bytes: static (18 bytes/param = 9x the bf16 bytes) + activations of each device
    tight = SplitProblem(prof, devices=2, microbatches=4, usable_bytes=25.0 * GIB)
    for split in _all_splits(len(prof), 2):
        statics = tight.static_bytes(split)
        fits = all(s <= 25.0 * GIB for s in statics) and tight.memory_fits(split)
        assert math.isfinite(tight.bound(split)) == (fits and split[0] > 1)
    lower, split = tight.min_bound()
    brute = min(tight.bound(s) for s in _all_splits(len(prof), 2))
    assert brute - 0.03 <= lower <= brute and tight.bound(split) == pytest.approx(brute)
    none = SplitProblem(prof, devices=2, microbatches=4, usable_bytes=1.0 * GIB)
    assert none.min_bound() == (math.inf, None)


def test_instance_limits_are_what_static_memory_leaves():
    prob = SplitProblem(_profile(6), devices=2, microbatches=4, usable_bytes=40.0 * GIB)
    inst = prob.instance((4, 4))
    static = prob.static_bytes((4, 4))
    assert static == [9 * (1 + 3 * 0.5) * GIB, 9 * (3 * 0.5 + 1) * GIB]
    assert list(inst.limit) == pytest.approx([40 - s / GIB for s in static])
    assert inst.extra["meta"]["static_gib"] == pytest.approx([s / GIB for s in static])
