"""Segmented tables on the real model: loss and gradients equal the unsegmented single-process
reference (rtol 1e-5, fp32) for k = 2 and 4 on 2 and 4 gloo ranks, for seq1f1b, seq1f1b-zb and
a solver schedule; a segment's I waits for the later segments' (the runner refuses otherwise);
models and engines that cannot run segments are refused before anything runs."""

from __future__ import annotations

import pytest
from conftest import assert_runs_match_reference

torch = pytest.importorskip("torch")

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.executor import ExecutorTable, lower  # noqa: E402
from zbsolve.instance import load_instance  # noqa: E402
from zbsolve.runtime.iw_split import MemoryTracker  # noqa: E402
from zbsolve.runtime.launch import run_jobs  # noqa: E402
from zbsolve.runtime.model import (  # noqa: E402
    GPTConfig,
    build_stage_modules,
    lm_loss,
    make_batch,
    microbatch,
)
from zbsolve.runtime.reference import rel_diff, run_reference  # noqa: E402
from zbsolve.runtime.runner import Job, RunOptions, TableMismatch, check_table  # noqa: E402
from zbsolve.runtime.segmented import SegmentedStageRunner, token_lengths  # noqa: E402

pytestmark = pytest.mark.torch
RTOL = 1e-5
SEQ = 16


def cfg_for(stages: int) -> GPTConfig:
    return GPTConfig.preset("gpt-tiny", layers=stages, hidden=32, heads=4, seq=SEQ, vocab=64)


def seg_instance(p: int, m: int, k: int, v: int = 1, placement: str = "loop", limit=None):
    return load_instance(dict(
        name=f"seg-p{p}-k{k}", devices=p, microbatches=m, chunks=v, placement=placement,
        segments=k, segment_lengths="balanced", segment_costs="prefix",
        segment_model=dict(seq=SEQ, hidden=32, heads=4, layers=1, vocab=64),
        times=dict(F=1.0, I=1.1, W=0.6), comm=0.05,
        memory=dict(activation=1.0, weight=0.4, limit=limit)))


def solver_table(p: int, m: int, k: int, v: int = 1, placement: str = "loop") -> ExecutorTable:
    """A solver schedule under a budget no hand-made schedule fits (so it is the solver's)."""
    from zbsolve.solver import SolveOptions, solve

    inst = seg_instance(p, m, k, v, placement, limit=1.2 * v)
    res = solve(inst, SolveOptions(time_limit=2, workers=1, seed=0))
    assert all(not r.applicable or not r.result.feasible for r in res.baselines)
    assert res.sim.feasible and max(res.sim.peak_memory) <= 1.2 * v + 1e-9
    return lower(inst, res.schedule)


def tables(p: int, m: int) -> list[tuple[str, ExecutorTable]]:
    out = []
    for k in (2, 4):
        inst = seg_instance(p, m, k)
        out += [(f"{name} k={k}", lower(inst, generate(name, inst)))
                for name in ("seq1f1b", "seq1f1b-zb")]
        out.append((f"solver k={k}", solver_table(p, m, k)))
    if p == 2:  # two stages per rank: hand-offs between a rank's own stages carry segments too
        out.append(("solver k=2 v=2", solver_table(p, m, 2, 2, "v")))
    return out


def _run(p: int, m: int) -> list[dict]:
    todo = tables(p, m)
    jobs = [Job(t.to_dict(), cfg_for(t.stages).to_dict(), label=label) for label, t in todo]
    reports = run_jobs(jobs, p, RunOptions(timeout_s=60, steps=1))
    assert_runs_match_reference(reports, [label for label, _ in todo], RTOL)
    for r in reports:
        assert all(b > 0 for b in r["peak_activation_bytes"])
    return reports


def test_two_ranks_segments_equal_the_reference():
    _run(2, 2)


def test_four_ranks_segments_equal_the_reference():
    _run(4, 2)


# ---------------------------------------------------------------------- one process
def test_segment_kv_gradients_flow_back_and_order_is_enforced():
    """Two stages in one process, microbatch by microbatch: the same gradients as the reference,
    a segment's keys and values are its own activation, and an I run before a later segment's
    is refused."""
    cfg = cfg_for(2)
    lengths = (7, 5, 4)
    mods = build_stage_modules(cfg, 2)
    mem = MemoryTracker()
    runners = [SegmentedStageRunner(mods[s], s, 2, lm_loss, 0.5, mem, lengths) for s in (0, 1)]
    tokens, targets = make_batch(cfg, 2, 0)
    for j in range(2):
        for g in range(3):
            x = runners[0].segment(microbatch(tokens, cfg, j), g)
            h = runners[0].forward(j, x, seg=g)
            runners[1].forward(j, h, runners[1].segment(microbatch(targets, cfg, j), g), seg=g)
        if j == 0:
            with pytest.raises(RuntimeError, match="I of microbatch 0 segment 1 before the I "
                               r"of segment\(s\) \[2\]"):
                runners[1].backward_input(0, None, seg=1)
        for g in reversed(range(3)):
            runners[0].backward_input(j, runners[1].backward_input(j, None, seg=g), seg=g)
        for g in range(3):
            runners[1].backward_weight(j, seg=g)
            runners[0].backward_weight(j, seg=g)
    ref = run_reference(cfg, 2, 1)
    grads = {n: p.grad for md in mods for n, p in md.global_names().items()}
    assert max(rel_diff(grads[n], g) for n, g in ref.steps[0].grads.items()) <= RTOL
    assert sum(runners[1].losses.values()) / 2 == pytest.approx(ref.steps[0].loss, rel=RTOL)
    b, h = cfg.microbatch_size, cfg.hidden
    assert runners[0].kv_bytes == {g: 2 * b * n * h * 4 for g, n in enumerate(lengths)}
    assert mem.current == 0 and not runners[0].pending
    with pytest.raises(RuntimeError, match="segment 1 of microbatch 0 runs before segment"):
        runners[0].forward(0, runners[0].segment(microbatch(tokens, cfg, 0), 1), seg=1)


def test_token_lengths():
    assert token_lengths((9.0, 7.0), 16) == (9, 7)
    assert token_lengths((1.0, 1.0, 1.0), 16) == (6, 5, 5)
    assert sum(token_lengths((0.1, 5.0, 1.0), 7)) == 7


def test_segmented_tables_refused_where_they_cannot_run():
    inst = seg_instance(2, 2, 2)
    table = lower(inst, generate("seq1f1b", inst))
    llama = {"kind": "hf", "model_type": "llama", "layers": 2, "hidden": 32, "heads": 4,
             "seq": SEQ, "vocab": 64}
    with pytest.raises(TableMismatch, match="only the runner's GPT runs segments"):
        check_table(table, 2, llama)
    with pytest.raises(TableMismatch, match="4 segments need at least 4 tokens"):
        big = seg_instance(2, 2, 4)
        check_table(lower(big, generate("seq1f1b", big)), 2, cfg_for(2).with_(seq=3))
    with pytest.raises(TableMismatch, match="engine torch: torch's pipelining runtime has no "
                       "sequence segments"):
        check_table(table, 2, cfg_for(2), engine="torch")
