"""Exports: executor tables + P2P proof, torch CSV (strict reader, torch's own parser), traces, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from zbsolve.baselines import NAMES, NotApplicable, generate
from zbsolve.data import reference_path
from zbsolve.export.chrome_trace import trace_events
from zbsolve.export.executor import (
    SCHEMA_PATH,
    Action,
    ExecutorError,
    ExecutorTable,
    instance_of,
    load_table,
    lower,
    schedule_from_table,
    validate_json,
)
from zbsolve.export.files import load_schedule
from zbsolve.export.p2p_check import P2PError, check, require_safe
from zbsolve.export.torch_csv import TorchCSVError, read_torch_csv, write_torch_csv
from zbsolve.instance import load_instance
from zbsolve.ops import Op, Pair
from zbsolve.schedule import Schedule, fuse_backward, unpair
from zbsolve.simulate import ScheduleError, simulate

ROOT = Path(__file__).resolve().parent.parent
DUALPIPEV_CSV = reference_path("torch-artifacts/dualpipev_4rank_10mb.csv")
DUALPIPEV_INST = ROOT / "instances" / "torch-dualpipev-p4-m10.yaml"


def _inst(p: int, m: int, v: int = 1, placement: str = "loop", comm: float = 0.3,
          replicas: int = 1, segments: int = 1, **times):
    return load_instance({
        "name": f"t-p{p}-m{m}-v{v}-{placement}-r{replicas}-k{segments}", "devices": p,
        "microbatches": m, "chunks": v, "placement": placement, "comm": comm,
        "replicas": replicas, "segments": segments,
        "times": {"F": times.get("F", 1.0), "I": times.get("I", 1.2), "W": times.get("W", 0.7)},
        "memory": {"activation": 1.0, "weight": 0.4},
    })


INSTANCES = [
    _inst(4, 8),
    _inst(3, 7, comm=0.0, F=[1.0, 1.5, 0.8], I=[1.1, 0.9, 1.3], W=[0.5, 0.7, 0.6]),
    _inst(4, 8, v=2),
    _inst(4, 8, v=2, placement="v"),
    _inst(2, 6, v=2, placement="v", comm=1.0),
    _inst(4, 12, v=3, comm=0.1),
    _inst(4, 8, replicas=2),
    # memory modes (issue 13): a limit that 1F1B and ZB-H1 only meet with recompute or offload
    load_instance({**_inst(4, 8).to_dict(), "name": "t-p4-m8-modes",
                   "recompute": {"R": 1.0, "kept": 0.1}, "offload": {"d2h": 0.3},
                   "memory": {"activation": 1.0, "weight": 0.4, "limit": 3.5}}),
    _inst(3, 4, segments=2),  # the seq1f1b families (they refuse one segment)
]


def _family_cases():
    """(instance, schedule) for every hand-made family that applies to some test instance."""
    cases = []
    for inst in INSTANCES:
        for name in NAMES:
            try:
                sched = generate(name, inst)
            except NotApplicable:
                continue
            if simulate(inst, sched).feasible:  # the exports refuse what exceeds the limit
                cases.append((inst, sched))
    return cases


CASES = _family_cases()
CASE_IDS = [f"{s.name}@{i.name}" for i, s in CASES]


def test_cases_cover_the_available_families():
    covered = {s.name for _, s in CASES}
    assert {"gpipe", "1f1b"} <= covered
    # every registered family must import and be exercised (an ImportError fails, not skips)
    missing = set(NAMES) - covered
    assert not missing, f"families never applicable on the test instances: {missing}"


# ---------------------------------------------------------------------------- executor tables
@pytest.mark.parametrize("inst,sched", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("fuse", [False, True])
def test_every_family_lowers_to_a_deadlock_free_table(inst, sched, fuse):
    table = lower(inst, sched, fuse_bw=fuse)
    reports = require_safe(table)
    assert [r.mode for r in reports] == ["blocking", "batched"]
    n_transfers = sum(a.is_send for row in table.actions for a in row)
    assert all(r.transfers == n_transfers for r in reports)
    # exactly one SEND/RECV per cross-rank hand-off (per sequence segment), none between stages
    # of one rank
    S, R = inst.model_stages, inst.replicas
    expected = inst.microbatches // R * inst.segments * sum(
        2 for r in range(R) for s in range(r * S, r * S + S - 1)
        if inst.placement[s] != inst.placement[s + 1])
    assert n_transfers == expected
    assert sum(a.is_recv for row in table.actions for a in row) == expected
    # JSON: schema-valid, round trip, the schedule comes back
    data = json.loads(json.dumps(table.to_dict()))
    validate_json(data)
    assert ExecutorTable.from_dict(data) == table
    back = schedule_from_table(data)
    want = fuse_backward(sched) if fuse else sched
    assert back.orders == want.orders
    sim = simulate(inst, back)
    assert sim.makespan == pytest.approx(table.predicted["makespan"])
    for row in table.actions:
        for a in row:
            if not a.is_comm:
                assert (a.start, a.end) == (sim.start[a.op], sim.end[a.op])
    assert instance_of(table) == inst


@pytest.mark.parametrize("seed", range(40))
def test_random_valid_schedules_lower_deadlock_free(seed, tmp_path):
    """Any valid order (random topological orders, mixed B and I/W, random placements and times)
    lowers to a table that passes both P2P modes and survives the torch CSV round trip."""
    import random

    from conftest import random_valid_schedule

    rng = random.Random(seed)
    p, v = rng.randint(2, 5), rng.randint(1, 3)
    placement = rng.choice(["loop", "v", "explicit"])
    if placement == "explicit":
        placement = list(range(p)) + [rng.randrange(p) for _ in range(p * (v - 1))]
        rng.shuffle(placement)
    S = p * v
    inst = load_instance({
        "devices": p, "microbatches": rng.randint(1, 7), "chunks": v, "placement": placement,
        "comm": rng.choice([0.0, 0.25, 1.0]),
        "times": {k: [rng.choice([0.5, 1.0, 1.5, 2.0]) for _ in range(S)] for k in "FIW"},
    })
    sched = random_valid_schedule(inst, rng)
    for fuse in (False, True):
        table = lower(inst, sched, fuse_bw=fuse)
        require_safe(table)
        assert schedule_from_table(table).orders == (fuse_backward(sched) if fuse
                                                      else sched).orders
    write_torch_csv(inst, sched, tmp_path / "r.csv", comms=True)
    assert read_torch_csv(tmp_path / "r.csv").orders == sched.orders


def test_table_contents_on_two_ranks():
    inst = load_instance({"name": "demo", "devices": 2, "microbatches": 2, "comm": 0.5,
                          "times": {"F": 1, "I": 1, "W": 1}})
    table = lower(inst, generate("1f1b", inst))
    assert [a.token for a in table.actions[0]] == [
        "0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"]
    assert [a.token for a in table.actions[1]] == [
        "1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1"]
    send = table.actions[0][1]
    assert (send.peer, send.peer_stage, send.batch, send.start, send.end) == (1, 1, 0, 1.0, 1.5)
    recv = table.actions[1][2]  # transfer of mb 1 lands while F0 runs: listed after it
    assert (recv.peer, recv.peer_stage, recv.start, recv.end) == (0, 0, 2.0, 2.5)
    assert (send.message, recv.message) == (("F", 0, 1, 0, 0), ("F", 0, 1, 1, 0))
    assert table.predicted["makespan"] == 10.0


def test_same_rank_hand_offs_have_no_p2p():
    inst = _inst(2, 4, v=2, placement="v")  # stages 1 and 2 share rank 1
    table = lower(inst, _sequential(inst))
    assert require_safe(table)
    for row in table.actions:
        for a in row:
            if a.is_comm:
                assert {a.stage, a.peer_stage} != {1, 2}


def _sequential(inst):
    """A trivially valid schedule for any placement: each microbatch end to end (GPipe-like)."""
    orders = [[] for _ in range(inst.devices)]
    for mb in range(inst.microbatches):
        for s in range(inst.stages):
            orders[inst.placement[s]].append(Op("F", s, mb))
        for s in reversed(range(inst.stages)):
            orders[inst.placement[s]] += [Op("I", s, mb), Op("W", s, mb)]
    return Schedule(orders, "sequential")


def test_adjacent_placement_deadlocks_with_blocking_sends():
    inst = _inst(4, 8, comm=0.5, I=1.0, W=1.0)
    sched = generate("1f1b", inst)
    naive = lower(inst, sched, placement="adjacent")
    report = check(naive, "blocking")
    assert not report.ok and not report.errors
    assert report.stuck == [
        "rank 0 stuck at position 7: 0SEND_F3 (send to rank 1); rank 1 is at position 8 "
        "(1SEND_F2)",
        "rank 1 stuck at position 8: 1SEND_F2 (send to rank 2); rank 2 is at position 5 "
        "(2SEND_F1)",
        "rank 2 stuck at position 5: 2SEND_F1 (send to rank 3); rank 3 is at position 3 "
        "(3SEND_B0)",
        "rank 3 stuck at position 3: 3SEND_B0 (send to rank 2); rank 2 is at position 5 "
        "(2SEND_F1)",
    ]
    assert check(naive, "batched").ok  # batching a step's sends and receives rescues it
    with pytest.raises(P2PError, match="deadlock"):
        require_safe(naive)
    assert require_safe(lower(inst, sched))


def _edit(table: ExecutorTable, rank: int, fn) -> ExecutorTable:
    actions = [list(row) for row in table.actions]
    actions[rank] = fn(actions[rank])
    return ExecutorTable(table.instance, table.placement, actions, table.schedule_name)


def _renumber(row: list[Action]) -> list[Action]:
    from zbsolve.export.executor import _number_batches

    return _number_batches([Action(a.kind, a.stage, a.mb, a.start, a.end, a.peer,
                                   a.peer_stage) for a in row])


def test_checker_rejects_broken_tables():
    inst = _inst(3, 4)
    table = lower(inst, generate("1f1b", inst))
    # a missing RECV
    no_recv = _edit(table, 1, lambda r: _renumber([a for a in r if a.token != "1RECV_F2"]))
    errors = check(no_recv).errors
    assert any("1F2" in e and "no such RECV" in e for e in errors), errors
    # a SEND before the compute that produces it
    def early(r):
        i = next(k for k, a in enumerate(r) if a.token == "0SEND_F1")
        j = next(k for k, a in enumerate(r) if a.token == "0F1")
        a = r.pop(i)
        r.insert(j, a)
        return _renumber(r)
    errors = check(_edit(table, 0, early)).errors
    assert any("sends 0F1's output before computing it" in e for e in errors), errors
    # two sends reordered: FIFO matching would hand over the wrong tensor
    def late(r):
        a = r.pop(next(k for k, a in enumerate(r) if a.token == "0SEND_F0"))
        r.insert(next(k for k, a in enumerate(r) if a.token == "0SEND_F1") + 1, a)
        return _renumber(r)
    swapped = _edit(table, 0, late)
    assert check(swapped, "blocking").errors == [
        "mismatch: rank 0 sends 0SEND_F1 while rank 1 expects 1RECV_F0 (FIFO matching would "
        "deliver the wrong tensor)"]
    assert check(swapped, "batched").errors == [
        "mismatch on channel rank 0 -> rank 1: send #0 is 0SEND_F1 but receive #0 is 1RECV_F0"]
    # wrong peer
    def wrong_peer(r):
        return [Action(a.kind, a.stage, a.mb, a.start, a.end, 2, a.peer_stage, a.batch)
                if a.token == "0SEND_F0" else a for a in r]
    errors = check(_edit(table, 0, wrong_peer)).errors
    assert any("peer should be stage 1 on rank 1" in e for e in errors), errors
    with pytest.raises(ValueError, match="mode"):
        check(table, "eager")


def test_schema_file_and_rejections(tmp_path):
    schema = json.loads(SCHEMA_PATH.read_text())
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)
    inst = _inst(2, 2)
    data = lower(inst, generate("gpipe", inst)).to_dict()
    bad = json.loads(json.dumps(data))
    bad["ranks"][0]["actions"][0]["kind"] = "X"
    with pytest.raises(ExecutorError, match="ranks/0/actions/0"):
        validate_json(bad)
    with pytest.raises(ExecutorError, match="version"):
        validate_json({**data, "version": 2})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert load_table(path).to_dict() == data
    assert load_schedule(path).orders == generate("gpipe", inst).orders


def test_lower_rejects_invalid_schedules():
    inst = _inst(2, 2)
    sched = generate("gpipe", inst)
    broken = Schedule([sched.orders[0][:-1], sched.orders[1]], "broken")
    with pytest.raises(ScheduleError, match="missing"):
        lower(inst, broken)
    tight = inst.with_(limit=1.0)
    with pytest.raises(ScheduleError, match="memory limit"):
        lower(tight, sched)


def test_solver_schedule_exports():
    from zbsolve import solver

    inst = _inst(3, 4, comm=0.2)
    res = solver.solve(inst, solver.SolveOptions(time_limit=5, workers=1, seed=0))
    sched = res.schedule
    assert any(op.kind == "I" for order in sched.orders for op in order)
    table = lower(inst, sched)
    require_safe(table)
    assert schedule_from_table(table.to_dict()).orders == sched.orders
    assert require_safe(lower(inst, sched, fuse_bw=True))


# ---------------------------------------------------------------------------- torch CSV
def _refuses_modes(inst, sched, path) -> bool:
    """Torch's runtime has no recompute / offload actions: its formats refuse such schedules."""
    if not any(op.kind in ("R", "O", "L") for op in sched.ops()):
        return False
    for comms in (False, True):
        with pytest.raises(TorchCSVError, match="the schedule uses memory modes"):
            write_torch_csv(inst, sched, path, comms=comms)
        assert not path.exists()
    return True


@pytest.mark.parametrize("inst,sched", CASES, ids=CASE_IDS)
def test_torch_csv_round_trip(inst, sched, tmp_path):
    path = tmp_path / f"{sched.name}.csv"
    if _refuses_modes(inst, sched, path):
        return
    extended = inst.replicas > 1 or inst.segments > 1
    rows = write_torch_csv(inst, sched, path, extended=extended)
    assert rows == [[str(op) for op in order] for order in sched.orders]
    assert read_torch_csv(path).orders == sched.orders
    if extended:
        return  # comms are torch's form only
    comms = tmp_path / "comms.csv"
    write_torch_csv(inst, sched, comms, comms=True)
    assert read_torch_csv(comms).orders == sched.orders


def _torch_load(path: Path):
    """What torch's _load_csv does: _Action.from_str per cell, rows = ranks, then validation."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    with path.open(newline="") as fh:
        actions = {r: [schedules._Action.from_str(c) for c in row]
                   for r, row in enumerate(csv.reader(fh))}
    return schedules, actions


@pytest.mark.parametrize("inst,sched", CASES, ids=CASE_IDS)
def test_torch_parses_our_csv_to_the_same_actions(inst, sched, tmp_path):
    path = tmp_path / "s.csv"
    if _refuses_modes(inst, sched, path):
        return
    if inst.replicas > 1:  # torch's runtime has one last stage: refused with the reason
        with pytest.raises(TorchCSVError, match="cannot run two replicas"):
            write_torch_csv(inst, sched, path)
        assert not path.exists()
        return
    if inst.segments > 1:  # torch's CSV has no segment index: refused with the reason
        with pytest.raises(TorchCSVError, match="has no segment index"):
            write_torch_csv(inst, sched, path)
        assert not path.exists()
        return
    write_torch_csv(inst, sched, path)
    schedules, actions = _torch_load(path)
    assert {r: [(a.stage_index, a.computation_type.value, a.microbatch_index) for a in row]
            for r, row in actions.items()} == {
        r: [(op.stage, op.kind, op.mb) for op in order] for r, order in enumerate(sched.orders)}
    mapping = schedules._validate_schedule(actions, inst.devices, inst.stages, inst.microbatches)
    assert mapping == dict(enumerate(inst.placement))
    # the lowered form: torch's own comm simulation finds no hang and the same mapping
    comms = tmp_path / "c.csv"
    write_torch_csv(inst, sched, comms, comms=True)
    schedules, actions = _torch_load(comms)
    assert schedules._validate_schedule(actions, inst.devices, inst.stages,
                                        inst.microbatches) == dict(enumerate(inst.placement))
    no_reduce = {r: [a for a in row if a.computation_type.value != "REDUCE_GRAD"]
                 for r, row in actions.items()}
    schedules._simulate_comms_compute(no_reduce, lambda s: inst.placement[s], inst.stages)
    reduce = [a for row in actions.values() for a in row
              if a.computation_type.value == "REDUCE_GRAD"]
    assert sorted(a.stage_index for a in reduce) == list(range(inst.stages))


def test_torch_csv_with_fused_backward(tmp_path):
    inst = _inst(4, 8)
    sched = _sequential(inst)
    rows = write_torch_csv(inst, sched, tmp_path / "f.csv", fuse_bw=True)
    assert all("I" not in tok and "W" not in tok for row in rows for tok in row)
    assert read_torch_csv(tmp_path / "f.csv").orders == fuse_backward(sched).orders


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "x.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text,message", [
    ("0F0,0F1\n1F0,1F1x\n", "row 2 (rank 1), column 2: bad token '1F1x'"),
    ("0F0,0X1\n", "row 1 (rank 0), column 2: bad token '0X1'"),
    ("0F0,F1\n", "column 2: bad token 'F1'"),
    ("0F0,0F-1\n", "bad token '0F-1'"),
    ("0F0,(0F1;1Bx)OVERLAP_F_B\n", "column 2: bad sub-action '1Bx'"),
    ("0F0,(0F1)OVERLAP_F_B\n", "a forward and a backward (two sub-actions), got 1"),
    ("0F0,0F1\n1F0,0F1\n", "row 2 (rank 1), column 2: duplicate action 0F1 (first at row 1, "
                           "column 2)"),
    ("0F0,(0F0;1B0)OVERLAP_F_B\n", "duplicate action 0F0"),
    ("0F0,0SEND_F0,0SEND_F0\n", "column 3: duplicate action 0SEND_F0"),
])
def test_torch_csv_reader_is_strict(tmp_path, text, message):
    with pytest.raises(TorchCSVError) as exc:
        read_torch_csv(_write(tmp_path, text))
    assert message in str(exc.value)


def test_torch_csv_reader_grammar(tmp_path):
    path = _write(tmp_path, "0F0,,(0F1;1B0)OVERLAP_F_B,0SEND_F1,0REDUCE_GRAD\n1F0, 1I1 \n\n")
    sched = read_torch_csv(path)
    assert sched.orders == [[Op("F", 0, 0), Pair(Op("F", 0, 1), Op("B", 1, 0))],
                            [Op("F", 1, 0), Op("I", 1, 1)], []]
    assert unpair(sched).orders[0] == [Op("F", 0, 0), Op("F", 0, 1), Op("B", 1, 0)]
    assert sched.meta["overlap_f_b"] == [["0F1", "1B0"]]
    assert sched.meta["non_compute_actions_skipped"] == 2
    assert len(sched.orders) == 3


def test_torch_dualpipev_reference_is_read_and_judged():
    inst = load_instance(DUALPIPEV_INST)
    assert (inst.devices, inst.microbatches, inst.chunks, inst.placement) == (
        4, 10, 2, (0, 1, 2, 3, 3, 2, 1, 0))
    pairs = read_torch_csv(DUALPIPEV_CSV)
    assert len(pairs.meta["overlap_f_b"]) == 41  # grep -o OVERLAP_F_B | wc -l
    sched = unpair(pairs)  # the instance allows no overlap: torch runs the halves in turn
    ops = [op for order in sched.orders for op in order]
    assert sum(op.kind == "F" for op in ops) == 80
    result = simulate(inst, sched)
    assert result.makespan == 63.0 and result.peak_memory == [9.0, 9.0, 9.0, 9.0]
    assert require_safe(lower(inst, sched))
    with pytest.raises(ScheduleError, match="allows no overlapped F&B"):
        simulate(inst, pairs)
    # with overlap allowed, our DualPipeV marks exactly torch's 41 pairs
    overlapping = load_instance({**inst.to_dict(), "overlap": {"FB": 0.8}})
    assert generate("dualpipev", overlapping).orders == pairs.orders
    table = lower(overlapping, pairs)
    assert sum(a.is_pair for row in table.actions for a in row) == 41
    assert require_safe(table)
    assert ExecutorTable.from_dict(json.loads(json.dumps(table.to_dict()))).actions == table.actions


# ---------------------------------------------------------------------------- chrome trace
def test_chrome_trace():
    inst = _inst(4, 8, v=2, placement="v")
    sched = _sequential(inst)
    table = lower(inst, sched)
    trace = json.loads(json.dumps(trace_events(inst, sched, table=table)))
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(sched) == 3 * inst.stages * inst.microbatches
    assert sorted(e["name"] for e in slices) == sorted(str(op) for op in
                                                       sum(sched.orders, []))
    sim = simulate(inst, sched)
    first = next(e for e in slices if e["name"] == "7F0")
    assert first["tid"] == 0 and first["args"]["chunk"] == 1 and first["args"]["stage"] == 7
    assert first["ts"] == sim.start[Op("F", 7, 0)] * 1000
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {f"device {d}" for d in range(4)}
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {f"memory device {d}" for d in range(4)}
    assert len(counters) == sum(len(c) for c in sim.memory_curve)
    p2p = [e for e in events if e["ph"] == "i"]
    assert len(p2p) == sum(a.is_comm for row in table.actions for a in row)


# ---------------------------------------------------------------------------- CLI
def test_cli_export_every_format_and_check(tmp_path, capsys):
    from zbsolve.cli import main

    inst_path = ROOT / "instances" / "seed" / "teaching-p4-m8.yaml"
    inst = load_instance(inst_path)
    sched_path = tmp_path / "s.json"
    generate("1f1b", inst).dump(sched_path)
    outs = {"executor": "t.json", "torch-csv": "t.csv", "torch-csv-comms": "tc.csv",
            "chrome-trace": "trace.json"}
    for fmt, name in outs.items():
        assert main(["export", str(sched_path), "--instance", str(inst_path), "--format", fmt,
                     "-o", str(tmp_path / name)]) == 0
        assert "p2p blocking ok, p2p batched ok" in capsys.readouterr().out
    for name in ("t.json", "t.csv", "tc.csv"):
        assert main(["check", str(inst_path), str(tmp_path / name), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["makespan"] == 33.0
    assert main(["export", str(tmp_path / "t.json"), "--instance", str(inst_path), "--format",
                 "executor", "-o", str(tmp_path / "t2.json"), "--fuse-bw"]) == 0
    # an invalid schedule is refused with a clear error, nothing written
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0\n1F0\n2F0\n3F0\n")
    assert main(["export", str(bad), "--instance", str(inst_path), "--format", "executor",
                 "-o", str(tmp_path / "no.json")]) == 2
    assert "missing" in capsys.readouterr().err
    assert not (tmp_path / "no.json").exists()


def test_cli_check_reads_the_torch_dualpipev_csv(capsys):
    from zbsolve.cli import main

    assert main(["check", str(DUALPIPEV_INST), str(DUALPIPEV_CSV), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["makespan"] == 63.0 and out["valid"] is True


def test_export_path_never_imports_torch(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import zbsolve.export.executor, zbsolve.export.p2p_check, zbsolve.export.torch_csv\n"
        "import zbsolve.export.chrome_trace, zbsolve.plot, zbsolve.cli.export, zbsolve.cli.show\n"
        "from zbsolve.cli import main\n"
        "main(['export', sys.argv[1], '--instance', sys.argv[2], '--format', 'torch-csv-comms',"
        " '-o', sys.argv[3]])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    tmp = tmp_path
    inst = load_instance(ROOT / "instances" / "seed" / "teaching-p4-m8.yaml")
    generate("1f1b", inst).dump(tmp / "s.json")
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp / "s.json"),
         str(ROOT / "instances" / "seed" / "teaching-p4-m8.yaml"), str(tmp / "o.csv")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp / "o.csv").exists()


# ---------------------------------------------------------------------------- torch runtime
def _torch_stage_modules(S: int):
    import torch

    torch.manual_seed(0)
    return [torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh()) for _ in range(S)]


def _torch_batch(m: int):
    import torch

    gen = torch.Generator().manual_seed(1)
    return torch.randn(2 * m, 6, generator=gen), torch.randn(2 * m, 6, generator=gen)


def _mse(y, t):
    return ((y - t) ** 2).mean()


def _torch_worker(rank, world, csv_path, placement, m, out, port):  # pragma: no cover - child
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    S = len(placement)
    mods = _torch_stage_modules(S)
    mine = [s for s in range(S) if placement[s] == rank]
    stages = [PipelineStage(mods[s], s, S, torch.device("cpu")) for s in mine]
    runtime = _PipelineScheduleRuntime(stages, m, loss_fn=_mse)
    runtime._load_csv(csv_path, format="compute_comms")
    x, t = _torch_batch(m)
    kwargs = {"target": t} if placement[-1] == rank else {}
    runtime.step(*([x] if placement[0] == rank else []), **kwargs)
    torch.save({s: [p.grad for p in mods[s].parameters()] for s in mine}, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.torch
def test_torch_runtime_runs_our_comms_csv_on_gloo(tmp_path):
    """torch's own runtime executes our lowered CSV (format="compute_comms") on 2 gloo ranks:
    V placement with a same-rank hand-off, I/W split, REDUCE_GRAD; gradients match one process."""
    torch = pytest.importorskip("torch")
    import socket

    import torch.multiprocessing as mp

    inst = _inst(2, 4, v=2, placement="v")
    sched = generate("zb-v", inst)
    path = tmp_path / "zbv.csv"
    write_torch_csv(inst, sched, path, comms=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = str(tmp_path / "grads")
    mp.spawn(_torch_worker, args=(2, str(path), list(inst.placement), 4, out, port), nprocs=2,
             join=True)
    grads = {}
    for r in range(2):
        grads.update(torch.load(f"{out}.{r}"))
    mods = _torch_stage_modules(inst.stages)
    x, t = _torch_batch(4)
    y = x
    for mod in mods:
        y = mod(y)
    loss = sum(_mse(yc, tc) for yc, tc in zip(y.chunk(4), t.chunk(4))) / 4
    loss.backward()
    assert sorted(grads) == list(range(inst.stages))
    for s, mod in enumerate(mods):
        for got, param in zip(grads[s], mod.parameters()):
            torch.testing.assert_close(got, param.grad, rtol=1e-5, atol=1e-7)


def test_dump_refuses_a_table_that_can_deadlock(tmp_path):
    inst = _inst(4, 8, comm=0.5, I=1.0, W=1.0)
    naive = lower(inst, generate("1f1b", inst), placement="adjacent")
    with pytest.raises(P2PError, match="rank 0 stuck at position 7: 0SEND_F3"):
        naive.dump(tmp_path / "naive.json")
    assert not (tmp_path / "naive.json").exists()
    naive.dump(tmp_path / "naive.json", check=False)  # explicit opt-out, e.g. for a bug report
    assert load_table(tmp_path / "naive.json") == naive


@pytest.mark.parametrize("name", ["1f1b-offload", "1f1b-recompute"])
def test_chrome_trace_draws_memory_mode_jobs_and_gives_copies_their_own_track(name):
    # the trace once knew only F, I, W and B and raised KeyError on a recompute or a copy
    inst = INSTANCES[7]  # recompute and offload offered, under a limit that needs them
    sched = generate(name, inst)
    sim = simulate(inst, sched)
    slices = [e for e in trace_events(inst, sched)["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(sched)
    copies = [e for e in slices if e["args"]["kind"] in ("O", "L")]
    mode_kind = "O" if name == "1f1b-offload" else "R"
    assert any(e["args"]["kind"] == mode_kind for e in slices)
    assert bool(copies) == (name == "1f1b-offload")
    for e in slices:  # a copy on its device's copy track, p + device; the rest on the device's
        op = Op(e["args"]["kind"], e["args"]["stage"], e["args"]["microbatch"])
        device = inst.placement[op.stage]
        assert e["tid"] == device + (inst.p if e in copies else 0)
        assert e["ts"] == sim.start[op] * 1000
    for tid in {e["tid"] for e in slices}:  # no two events of a track overlap
        row = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["tid"] == tid)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(row, row[1:]))


def test_torchtitan_config_reads_the_ops_inside_overlapped_pairs():
    # it once asked every entry for its kind and raised AttributeError on a Pair met before
    # any I or W: here one device runs a V with fused backwards, one of them in a pair
    from zbsolve.export.torchtitan import torchtitan_config
    from zbsolve.ops import parse_op

    inst = load_instance({"devices": 1, "microbatches": 2, "chunks": 2, "placement": "v",
                          "times": {"F": 1, "I": 1, "W": 1}, "overlap": {"FB": 0.5}})
    row = [parse_op(t) for t in ("0F0", "1F0")] + [Pair(parse_op("0F1"), parse_op("1B0"))]
    row += [parse_op(t) for t in ("0B0", "1F1", "1B1", "0B1")]
    sched = Schedule([row])
    assert simulate(inst, sched).feasible
    cfg = torchtitan_config(inst, sched, [2, 2])
    # one device: the V is a loop as well; no I or W anywhere, so the backward is not split
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"


@pytest.mark.parametrize("case, reason", [(6, "two replicas"), (7, "memory modes"),
                                          (8, "sequence segments")])
def test_torchtitan_refuses_what_torch_cannot_run_with_the_reason(case, reason):
    # two replicas were refused for their placement ("place stages in a loop"), memory modes
    # and segments as "--format torch-csv"; each now names its own reason, as torchtitan's
    from zbsolve.export.torchtitan import TorchtitanExportError, torchtitan_config

    inst = INSTANCES[case]
    name = {6: "chimera", 7: "1f1b-recompute", 8: "seq1f1b"}[case]
    with pytest.raises(TorchtitanExportError, match=f"^torchtitan: .*{reason}"):
        torchtitan_config(inst, generate(name, inst), [2] * inst.stages)
