"""The runner on two-replica tables (Chimera, DualPipe, solver schedules with ``replicas: 2``)
and on tables with overlapped F&B pairs (DualPipeV, solver schedules with ``overlap``): gloo
gradients, losses and parameters after 2 steps equal the single-process reference of the one
model on 2 and 4 ranks; torch's parser reads our OVERLAP_F_B cells; torch's runtime runs them
through our custom function.

Process start-up dominates on CPU, so each world size runs all its tables in one spawn.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import assert_runs_match_reference

torch = pytest.importorskip("torch")

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.executor import Action, ExecutorTable, lower  # noqa: E402
from zbsolve.export.torch_csv import write_torch_csv  # noqa: E402
from zbsolve.instance import load_instance  # noqa: E402
from zbsolve.ops import Op, Pair  # noqa: E402
from zbsolve.runtime.launch import run_jobs  # noqa: E402
from zbsolve.runtime.measure import Timing, pair_summary  # noqa: E402
from zbsolve.runtime.model import GPT, GPTConfig  # noqa: E402
from zbsolve.runtime.overlap import early_sends  # noqa: E402
from zbsolve.runtime.replicas import ReplicaLayout, stage_copies, sync_gradients  # noqa: E402
from zbsolve.runtime.runner import Job, RunOptions, TableMismatch, check_table  # noqa: E402
from zbsolve.runtime.workload import gpt_workload  # noqa: E402

pytestmark = pytest.mark.torch
RTOL = 1e-5


def small_cfg(layers: int) -> GPTConfig:
    return GPTConfig.preset("gpt-tiny", layers=layers, hidden=32, heads=4, seq=16, vocab=64)


def replicated(p: int, m: int) -> dict:
    return {"name": f"rep-p{p}-m{m}", "devices": p, "microbatches": m, "replicas": 2,
            "times": {"F": 1, "I": 1, "W": 1}, "comm": 0.1, "sync": 0.5}


def overlapping(p: int, m: int, fb: float = 0.7) -> dict:
    return {"name": f"v-p{p}-m{m}", "devices": p, "microbatches": m, "chunks": 2,
            "placement": "v", "times": {"F": 1, "I": 1, "W": 1}, "overlap": {"FB": fb},
            "comm": 0.1}


_SOLVED: dict[str, object] = {}


def solved(data: dict, seconds: float = 1.0):
    """A solver schedule, reproducible: fixed seed, one worker, ``seconds`` of CP-SAT's
    deterministic time (cached: the parser test and the 2-rank run share one)."""
    from zbsolve.solver import SolveOptions, solve

    key = json.dumps([data, seconds], sort_keys=True)
    if key not in _SOLVED:
        opts = SolveOptions(time_limit=seconds, workers=1, seed=0, deterministic=True)
        _SOLVED[key] = solve(load_instance(data), opts).schedule
    return _SOLVED[key]


def solver_table(data: dict, seconds: float = 1.0) -> ExecutorTable:
    return lower(load_instance(data), solved(data, seconds))


def family_table(name: str, data: dict) -> ExecutorTable:
    inst = load_instance(data)
    return lower(inst, generate(name, inst))


def pair_count(table: ExecutorTable) -> int:
    return sum(a.is_pair for row in table.actions for a in row)


def _check_reports(reports: list[dict], jobs: list[Job]) -> dict[str, dict]:
    assert_runs_match_reference(reports, [j.label for j in jobs], RTOL)
    return {r["label"]: r for r in reports}


def _replica_asserts(r: dict, table: ExecutorTable, cfg: GPTConfig) -> None:
    """Both copies of every parameter were checked (gradients of 2 steps and final values),
    both step identically, and every rank stamped its gradient sum."""
    n_params = len(list(GPT(cfg).parameters()))
    assert r["replicas"] == 2 and table.stages == 2 * r["ranks"]
    assert r["checked"] == 2 * (2 + 3 * n_params)  # 2 copies x (2 losses, 2 grads, 1 final)
    assert r["copies_max_abs_diff"] == 0.0
    assert r["timing"]["sync_ms"] > 0


def _pair_asserts(r: dict, table: ExecutorTable, steps: int = 2) -> None:
    """Every OVERLAP_F_B action ran as a pair, every step; the timing has their F&B figures."""
    assert r["overlap_f_b_ran"] == steps * pair_count(table) > 0
    if r["engine"] == "ours":
        pairs = r["timing"]["pairs"]
        assert pairs["count"] == pair_count(table)
        assert pairs["mean_ms"] > 0 and pairs["halves_mean_ms"] > 0
        assert r["sent_early"] == steps * sum(len(early_sends(row)) for row in table.actions)


# ---------------------------------------------------------------------- in-process units
def test_replica_copies_start_equal_and_their_gradients_sum():
    """One rank holding both copies of both stages: the copies are equal and distinct tensors,
    named as the unsplit model names them; the sync sums their gradients in memory (a copy
    whose microbatches left a gradient None counts as zero)."""
    cfg = small_cfg(2)
    work = gpt_workload(cfg.to_dict(), 2)
    layout = ReplicaLayout(model_stages=2, replicas=2, placement=(0, 0, 0, 0))
    copies = stage_copies(work, layout, 0)
    assert sorted(copies) == [0, 1, 2, 3]
    for s in (0, 1):
        (_, names0), (_, names1) = copies[s], copies[s + 2]
        assert names0.keys() == names1.keys() and names0
        for n in names0:
            assert torch.equal(names0[n], names1[n]) and names0[n] is not names1[n]
    gen = torch.Generator().manual_seed(0)
    expected = {}
    for s in (0, 1):
        (_, a), (_, b) = copies[s], copies[s + 2]
        for i, n in enumerate(a):
            a[n].grad = torch.randn(a[n].shape, generator=gen)
            b[n].grad = None if i == 0 else torch.randn(b[n].shape, generator=gen)
            expected[(s, n)] = a[n].grad + (0 if b[n].grad is None else b[n].grad)

    class Clock:
        def mark(self):
            return 0.0

    stamps = sync_gradients(layout, 0, copies, {}, Clock())
    assert [s for s, _, _ in stamps] == [0, 1]
    for s in (0, 1):
        for r in (0, 1):
            for n, p in copies[s + 2 * r][1].items():
                assert torch.equal(p.grad, expected[(s, n)]), (s, r, n)


def test_early_sends_are_the_forward_send_in_the_batch_after_its_pair():
    """A pair's forward SEND goes out early when it is in the batch right after the pair and
    no SEND to the same peer is before it there (per-peer message order kept); for NCCL
    (mixed_batches=False) only when it is alone in its batch."""
    def pair(mb):
        return Action("OVERLAP_F_B", 0, mb, mb, mb + 1,
                      pair=Pair(Op("F", 0, mb), Op("B", 1, mb - 1)))

    def comm(kind, stage, mb, peer, batch):
        return Action(kind, stage, mb, mb, mb + 0.1, peer=peer, batch=batch)

    actions = [
        pair(1), comm("RECV_B", 1, 1, 1, 0), comm("SEND_F", 0, 1, 1, 0),  # 0 -> 2: mixed
        pair(2), comm("SEND_F", 0, 2, 1, 1),  # 3 -> 4: alone in its batch
        pair(3), comm("SEND_B", 1, 2, 1, 2), comm("SEND_F", 0, 3, 1, 2),  # same peer first
        pair(4), comm("SEND_B", 1, 3, 2, 3), comm("SEND_F", 0, 4, 1, 3),  # 8 -> 10
        pair(5), Action("F", 1, 5, 5, 6), comm("SEND_F", 0, 5, 1, 4),  # compute between
    ]
    assert early_sends(actions) == {0: 2, 3: 4, 8: 10}
    assert early_sends(actions, mixed_batches=False) == {3: 4}


def _timing(kind, stage, mb, start, end, index, in_pair=False):
    return Timing(0, 1, index, kind, stage, mb, start, end, None, None, in_pair)


def test_pair_summary_compares_each_pair_with_its_halves_run_alone():
    rows = [
        _timing("F", 0, 0, 0.0, 1.0, 0), _timing("F", 0, 1, 1.0, 3.0, 1),  # F of 0: 1.5 mean
        _timing("I", 1, 0, 3.0, 4.0, 2), _timing("W", 1, 0, 4.0, 4.5, 3),  # B of 1: I + W
        _timing("OVERLAP_F_B", 0, 2, 5.0, 8.0, 4),
        _timing("F", 0, 2, 5.0, 6.0, 4, in_pair=True),
        _timing("B", 1, 1, 6.0, 7.5, 4, in_pair=True),
        _timing("OVERLAP_F_B", 2, 3, 8.0, 9.0, 5),  # no unpaired F of stage 2: not compared
        _timing("F", 2, 3, 8.0, 8.4, 5, in_pair=True),
        _timing("B", 1, 2, 8.4, 9.0, 5, in_pair=True),
    ]
    got = pair_summary(rows)
    assert got == {"count": 2, "mean_ms": 2.0, "halves_mean_ms": pytest.approx(1.75),
                   "compared": 1, "unpaired_f_plus_b_mean_ms": 3.0, "ratio": 1.0}


def test_torch_engine_refuses_two_replicas():
    table = family_table("chimera", replicated(2, 4))
    check_table(table, 2, small_cfg(2))  # our engine runs it
    with pytest.raises(TableMismatch, match="runs 2 model replicas: torch's pipelining runtime"):
        check_table(table, 2, small_cfg(2), "torch")


def _torch_read(path: Path):
    from torch.distributed.pipelining import schedules

    with path.open(newline="") as fh:
        return schedules, {r: [schedules._Action.from_str(c) for c in row]
                           for r, row in enumerate(csv.reader(fh))}


def _as_ours(a) -> tuple:
    if a.computation_type.value == "OVERLAP_F_B":
        return ("OVERLAP_F_B", tuple(_as_ours(s) for s in a.sub_actions))
    return (a.stage_index, a.computation_type.value, a.microbatch_index)


@pytest.mark.parametrize("source", ["dualpipev", "solver"])
def test_torch_parses_our_overlap_cells_to_the_same_actions(source, tmp_path):
    """Compute-only and compute_comms CSVs with ``(0F7;7B3)OVERLAP_F_B`` cells: torch's own
    ``_Action.from_str`` reads each cell to our op (a pair to its two sub-actions), its
    validation infers our placement, and its comm simulation of the lowered form (pairs as
    their two halves) finds no hang."""
    data = overlapping(2, 4, fb=0.5) if source == "solver" else overlapping(4, 8)
    inst = load_instance(data)
    sched = solved(data) if source == "solver" else generate("dualpipev", inst)
    assert sched.has_pairs

    def ours(entry) -> tuple:
        if isinstance(entry, Pair):
            return ("OVERLAP_F_B", tuple(ours(op) for op in entry))
        return (entry.stage, entry.kind, entry.mb)

    path = tmp_path / "compute.csv"
    write_torch_csv(inst, sched, path)
    schedules, actions = _torch_read(path)
    assert {r: [_as_ours(a) for a in row] for r, row in actions.items()} == {
        r: [ours(e) for e in order] for r, order in enumerate(sched.orders)}
    assert schedules._validate_schedule(actions, inst.devices, inst.stages,
                                        inst.microbatches) == dict(enumerate(inst.placement))

    comms = tmp_path / "comms.csv"
    write_torch_csv(inst, sched, comms, comms=True)
    schedules, actions = _torch_read(comms)
    table = lower(inst, sched)
    assert {r: [_as_ours(a) for a in row if a.computation_type.value not in
                ("SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD")]
            for r, row in actions.items()} == {
        r: [ours(a.entry) for a in row if not a.is_comm] for r, row in enumerate(table.actions)}
    assert sum(a.computation_type.value == "OVERLAP_F_B"
               for row in actions.values() for a in row) == pair_count(table)
    # torch's comm simulator knows no OVERLAP_F_B: give it the halves in the order its runtime
    # runs them without a custom function (forward, then backward)
    flat = {r: [x for a in row if a.computation_type.value != "REDUCE_GRAD"
                for x in (a.sub_actions if a.computation_type.value == "OVERLAP_F_B" else [a])]
            for r, row in actions.items()}
    schedules._simulate_comms_compute(flat, lambda s: inst.placement[s], inst.stages)


# ---------------------------------------------------------------------- multi-process runs
def test_two_ranks_replicas_pairs_solver_and_torch_custom_function(tmp_path):
    from zbsolve.runtime.torch_engine import write_csv_for

    cfg = small_cfg(4)
    tables = {
        "chimera": family_table("chimera", replicated(2, 4)),
        "dualpipe": family_table("dualpipe", replicated(2, 4)),
        "solver replicas": solver_table(replicated(2, 4)),
        "dualpipev pairs": family_table("dualpipev", overlapping(2, 4)),
        "solver pairs": solver_table(overlapping(2, 4, fb=0.5)),
    }
    jobs = [Job(t.to_dict(), cfg.to_dict(), label=label) for label, t in tables.items()]
    csv_path = tmp_path / "dualpipev.csv"
    write_csv_for(tables["dualpipev pairs"], str(csv_path))
    jobs.append(Job(tables["dualpipev pairs"].to_dict(), cfg.to_dict(), engine="torch",
                    torch_csv=str(csv_path), label="torch dualpipev pairs"))
    reports = _check_reports(run_jobs(jobs, 2, RunOptions(timeout_s=60)), jobs)
    for label in ("chimera", "dualpipe", "solver replicas"):
        _replica_asserts(reports[label], tables[label], cfg)
    for label in ("dualpipev pairs", "solver pairs"):
        _pair_asserts(reports[label], tables[label])
    torch_run = reports["torch dualpipev pairs"]
    _pair_asserts(torch_run, tables["dualpipev pairs"])  # our custom function ran every pair
    assert torch_run["sent_early"] > 0


def test_four_ranks_replicas_and_pairs_families_and_solver():
    cfg = small_cfg(8)
    tables = {
        "chimera": family_table("chimera", replicated(4, 8)),
        "dualpipe": family_table("dualpipe", replicated(4, 8)),
        "solver replicas": solver_table(replicated(4, 8)),
        "dualpipev pairs": family_table("dualpipev", overlapping(4, 8)),
        # a short budget: at 4 ranks CP-SAT's model with optional pairs takes a while to build
        "solver pairs": solver_table(overlapping(4, 8, fb=0.5), seconds=0.2),
    }
    jobs = [Job(t.to_dict(), cfg.to_dict(), label=label) for label, t in tables.items()]
    reports = _check_reports(run_jobs(jobs, 4, RunOptions(timeout_s=90)), jobs)
    for label in ("chimera", "dualpipe", "solver replicas"):
        _replica_asserts(reports[label], tables[label], cfg)
    for label in ("dualpipev pairs", "solver pairs"):
        _pair_asserts(reports[label], tables[label])
