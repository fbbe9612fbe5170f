"""The runner executes memory modes (recompute, offload) with gradients equal to the reference.

In-process: both stage runners (the GPT's custom-op split, the graph split of a layered model)
give bit-identical gradients with recompute and offload, release what the mode releases, and
refuse a mode op out of order. On 2 and 4 gloo ranks: the mode baselines, a hand-made mix and a
solver schedule that mixes keep, recompute and offload all match the single-process reference.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import assert_runs_match_reference, make_instance

torch = pytest.importorskip("torch")

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.executor import ExecutorTable, lower  # noqa: E402
from zbsolve.graph import TaskGraph  # noqa: E402
from zbsolve.instance import Instance  # noqa: E402
from zbsolve.ops import Op  # noqa: E402
from zbsolve.runtime.iw_split import MemoryTracker, StageRunner  # noqa: E402
from zbsolve.runtime.launch import run_jobs  # noqa: E402
from zbsolve.runtime.model import (  # noqa: E402
    GPTConfig,
    build_stage_modules,
    lm_loss,
    make_batch,
    microbatch,
)
from zbsolve.runtime.runner import Job, RunOptions, TableMismatch, check_table  # noqa: E402
from zbsolve.runtime.stage_modes import HostCopies  # noqa: E402
from zbsolve.schedule import Schedule  # noqa: E402

pytestmark = pytest.mark.torch
RTOL = 1e-5
MODES = {"recompute": {"R": 1, "kept": 0.1}, "offload": {"d2h": 0.1}}
SIZES = dict(hidden=32, heads=4, seq=16, vocab=64)


def gpt(layers: int) -> GPTConfig:
    return GPTConfig.preset("gpt-tiny", layers=layers, **SIZES)


def modes_instance(p: int, m: int, limit=None, **fields) -> Instance:
    return make_instance(p=p, m=m, F=1, I=1, W=1, comm=0.1, weight=0.4, limit=limit,
                         **(fields or MODES))


def mixed_solver_table(p: int) -> ExecutorTable:
    """A CP-SAT schedule whose memory limit forces keep, recompute and offload all three
    (deterministic solve: the same schedule on any machine; optimal at p = 2 and 4, m = 4)."""
    from zbsolve.solver.api import SolveOptions, solve

    inst = modes_instance(p, 4, limit={2: 1.5, 4: 2.2}[p],
                          recompute={"R": 1, "kept": 0.1}, offload={"d2h": 1.0})
    res = solve(inst, SolveOptions(time_limit=3, workers=1, seed=0, deterministic=True))
    graph = TaskGraph.of(inst, res.schedule.ops())
    used = Counter(graph.mode(s, j) for s in range(inst.stages) for j in range(4))
    assert set(used) == {"keep", "recompute", "offload"}, used
    return lower(inst, res.schedule)


def hand_mixed(p: int) -> tuple[Instance, Schedule]:
    """1F1B with PipeOffload's copies, one of its offloaded units recomputed instead."""
    from zbsolve.baselines.memory_modes import with_recompute

    inst = modes_instance(p, 4)
    sched = generate("1f1b-offload", inst)
    copied = [op.unit for op in sched.ops() if op.kind == "O"]
    assert len(copied) >= 2, "the rule should offload at least two units here"
    moved = set(copied[:1])
    out = with_recompute(sched, sorted(moved), "mixed")
    rows = [[e for e in row if not (e.kind in ("O", "L") and e.unit in moved)]
            for row in out.orders]
    return inst, Schedule(rows, name="mixed")


def mode_jobs(p: int) -> list[Job]:
    inst = modes_instance(p, 4)
    tables = [(name, lower(inst, generate(name, inst)))
              for name in ("1f1b", "1f1b-recompute", "zb-h1-recompute", "1f1b-offload")]
    tables.append(("mixed by hand", lower(*hand_mixed(p))))
    solver = mixed_solver_table(p)
    tables.append(("solver mix", solver))
    jobs = [Job(t.to_dict(), gpt(p).to_dict(), label=label) for label, t in tables]
    layered = {"kind": "gpt", "layers": p, **SIZES}  # the graph split's runner
    jobs.append(Job(solver.to_dict(), layered, label="solver mix, layered"))
    return jobs


# ---------------------------------------------------------------------- in-process units
def _runners(kind: str, mem: MemoryTracker):
    if kind == "gpt":
        return [StageRunner(st, i, 2, lm_loss, 0.5, mem)
                for i, st in enumerate(build_stage_modules(gpt(2), 2))]
    from zbsolve.runtime.workload import layered_workload

    work = layered_workload({"kind": "gpt", "layers": 2, **SIZES}, 2)
    return [work.make_runner(st, i, 2, work.loss_fn, 0.5, mem)
            for i, st in enumerate(work.stages)]


def _names(runners) -> dict[str, torch.Tensor]:
    out = {}
    for r in runners:
        for n, p in r.module.named_parameters():
            out[f"{r.index}.{n}"] = p.grad
    return out


def _one_step(kind: str, mode: str):
    """Two microbatches through two stages: every F in ``mode``, then (R | O, L), I, W."""
    torch.manual_seed(0)
    mem = MemoryTracker()
    runners = _runners(kind, mem)
    cfg = gpt(2)
    tokens, targets = make_batch(cfg, 2)
    copies = HostCopies(torch.device("cpu"))
    for mb in range(2):
        h = runners[0].forward_mode(mb, microbatch(tokens, cfg, mb), None, mode)
        runners[1].forward_mode(mb, h, microbatch(targets, cfg, mb), mode)
    after_f = mem.current
    facts = {"after_f": after_f}
    if mode == "offload":
        from torch.multiprocessing.reductions import StorageWeakRef

        boundary = {t.untyped_storage().data_ptr() for r in runners for st in r.pending.values()
                    for t in (st.x, st.root, getattr(st, "lead", None), getattr(st, "cut", None))
                    if t is not None}
        boundary |= {tokens.untyped_storage().data_ptr(), targets.untyped_storage().data_ptr()}
        originals = [StorageWeakRef(h.tensor.untyped_storage()) for r in runners
                     for st in r.pending.values() for h in st.census.holders
                     if h.tensor is not None and h.ptr not in boundary]
        facts["moved"] = sum(r.offload(mb, copies) for r in runners for mb in range(2))
        facts["released"] = len(originals) > 0 and all(w.expired() for w in originals)
        facts["after_o"] = mem.current
        held = [h for r in runners for st in r.pending.values() for h in st.census.holders]
        facts["on_host"] = sum(h.tensor is None for h in held)  # their device tensors let go
        with pytest.raises(RuntimeError, match="backward of microbatch 0 before its L"):
            runners[1].backward_input(0)
        for r in runners:
            for mb in range(2):
                r.load(mb)
        facts["back"] = all(h.tensor is not None for h in held)
    if mode == "recompute":
        with pytest.raises(RuntimeError, match="backward of microbatch 0 before its R"):
            runners[1].backward_input(0)
        for r in runners:
            for mb in range(2):
                r.recompute(mb)
    for mb in range(2):
        g = runners[1].backward_input(mb)
        runners[0].backward_input(mb, g)
        for r in runners:
            r.backward_weight(mb)
    assert mem.current == 0 and not any(r.pending or r.mode_leftovers for r in runners)
    return _names(runners), facts


@pytest.mark.parametrize("kind", ["gpt", "layered"])
def test_recompute_and_offload_keep_the_iw_split_exact(kind):
    torch.set_num_threads(1)
    keep, kf = _one_step(kind, "keep")
    rec, rf = _one_step(kind, "recompute")
    off, of = _one_step(kind, "offload")
    for name, g in keep.items():
        assert torch.equal(rec[name], g), name  # the same ops on the same values
        assert torch.equal(off[name], g), name  # copies are exact
    assert rf["after_f"] < kf["after_f"] / 10  # a recomputed F keeps its input only
    assert of["after_f"] == kf["after_f"] and of["on_host"] > 0 and of["back"]
    assert of["released"]  # every storage O moved is freed (but the batch the caller holds)
    assert of["moved"] > kf["after_f"] / 2  # all but the boundary tensors
    assert of["after_o"] == kf["after_f"] - of["moved"]


def test_mode_ops_out_of_order_are_refused():
    mem = MemoryTracker()
    first, last = _runners("gpt", mem)
    cfg = gpt(2)
    tokens, targets = make_batch(cfg, 1)
    copies = HostCopies(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="O of microbatch 0 without its forward"):
        first.offload(0, copies)
    with pytest.raises(RuntimeError, match="L of microbatch 0 without its O"):
        first.load(0)
    with pytest.raises(RuntimeError, match="R of microbatch 0 without a recomputed forward"):
        first.recompute(0)
    h = first.forward(0, microbatch(tokens, cfg, 0))
    first.offload(0, copies)
    with pytest.raises(RuntimeError, match="O of microbatch 0 twice"):
        first.offload(0, copies)
    first.load(0)
    with pytest.raises(RuntimeError, match="L of microbatch 0 twice"):
        first.load(0)
    with pytest.raises(RuntimeError, match="no selective variant"):
        last.forward_mode(0, h, microbatch(targets, cfg, 0), "selective")


# ---------------------------------------------------------------------- the table check
def _bad(table: ExecutorTable, rank: int, fix) -> ExecutorTable:
    data = table.to_dict()
    actions = data["ranks"][rank]["actions"]
    data["ranks"][rank]["actions"] = fix(actions)
    return ExecutorTable.from_dict(data)


def _token(action: dict) -> str:
    return f"{action['stage']}{action['kind']}{action.get('mb', '')}"


def _move(actions, token, before):
    """Move the action ``token`` to just before ``before``."""
    moved = actions.pop([_token(a) for a in actions].index(token))
    actions.insert([_token(a) for a in actions].index(before), moved)
    return actions


def test_table_check_accepts_modes_and_refuses_malformed_ones():
    inst, sched = hand_mixed(2)
    table = lower(inst, sched)
    cfg = gpt(2)
    check_table(table, 2, cfg)  # R, O and L actions run
    row = [a.token for a in table.actions[0]]
    rec = next(t for t in row if "R" in t and not t[1:].startswith("RECV"))
    out = next(t for t in row if "O" in t)
    s, j = out.split("O")
    fwd, load, bwd = f"{s}F{j}", f"{s}L{j}", next(t for t in row if t in (f"{s}B{j}",
                                                                          f"{s}I{j}"))
    rs, rj = rec.split("R")
    cases = [
        (lambda acts: _move(acts, rec, f"{rs}F{rj}"), rf"on {rec}, which needs {rs}F{rj} "),
        (lambda acts: _move(acts, bwd, load), rf"on {bwd}, which needs {load} "),
        (lambda acts: _move(acts, load, out), rf"position \d+: {load} comes before its input "
                                              rf"{out} \(row order"),
        (lambda acts: [a for a in acts if _token(a) != fwd], rf"missing op\(s\): {fwd}$"),
    ]
    for fix, reason in cases:
        bad = _bad(table, 0, fix)
        with pytest.raises(TableMismatch) as exc:
            check_table(bad, 2, cfg)
        line = str(exc.value)
        assert "\n" not in line and "cannot run" in line
        assert re.search(reason, line), line
    with pytest.raises(TableMismatch, match=r"engine torch: torch's pipelining runtime has no "
                                            r"recompute / offload actions"):
        check_table(table, 2, cfg, "torch")
    sel = inst.with_(recompute={"R": 1, "kept": 0.1, "R_selective": 0.5, "kept_selective": 0.3})
    rows = [list(r) for r in sched.orders]
    keep_unit = next(op for op in rows[1] if op.kind == "F"
                     and not any(o.unit == op.unit and o.kind in "ROL" for o in rows[1]))
    rows[1].insert(rows[1].index(keep_unit) + 1, Op("RS", *keep_unit.unit))
    with pytest.raises(TableMismatch, match=r"uses selective recompute \(RS actions\): the "
                                            r"runner's models have no selective variant"):
        check_table(lower(sel, Schedule(rows, name="sel")), 2, cfg)


# ---------------------------------------------------------------------- multi-process runs
@pytest.mark.parametrize("p", [2, 4])
def test_mode_schedules_match_the_reference_on_gloo(p):
    jobs = mode_jobs(p)
    reports = run_jobs(jobs, p, RunOptions(timeout_s=60))
    diffs = assert_runs_match_reference(reports, [j.label for j in jobs], RTOL)
    print({label: f"{d:.2e}" for label, d in diffs.items()})  # the figures for the report
    peak = {r["label"]: max(r["peak_activation_bytes"]) for r in reports}
    print(peak)
    # 1F1B holds p activations on rank 0; recomputed, one whole one plus p - 1 kept inputs
    assert peak["1f1b-recompute"] < 0.7 * peak["1f1b"]
    # PipeOffload's copy out follows the job after F, so 1F1B's peak (its first p forwards,
    # before any copy has ended) stays; the copies lower what is held between F and B
    assert peak["1f1b-offload"] <= peak["1f1b"]
    timed = {k for r in reports for k in (*r["timing"]["mean_ms"], *r["timing"].get("copy_ms", ()))}
    assert {"F", "R", "O", "L"} <= timed
