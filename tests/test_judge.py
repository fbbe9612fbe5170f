"""zbsolve.export.judge directly: reading every kind of schedule file, the header and layout
checks, the order of problems, and the one-line summary."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import make_instance

from zbsolve import size_limits
from zbsolve.baselines import generate
from zbsolve.cli import main
from zbsolve.export.executor import ExecutorTable, lower
from zbsolve.export.judge import (
    JudgeError,
    Verdict,
    _short,
    header_errors,
    instance_differences,
    instance_errors,
    judge,
    judge_table,
    read_schedule_file,
    require_ok,
    table_from_data,
)
from zbsolve.export.torch_csv import table_rows, write_rows
from zbsolve.schedule import ScheduleFileError

INST = make_instance(p=2, m=2, comm=0.5, activation=1.0, weight=0.5, name="p2")
SCHED = generate("1f1b", INST)
TABLE = lower(INST, SCHED)


def test_reads_every_kind_of_schedule_file(tmp_path):
    plain = tmp_path / "plain.json"
    SCHED.dump(plain)
    f = read_schedule_file(plain)
    assert (f.path, f.kind, f.table, f.header, f.has_comms) == (plain, "schedule", None, [], False)
    assert f.schedule.orders == SCHED.orders and f.schedule.name == "1f1b"
    unnamed = tmp_path / "unnamed.json"
    unnamed.write_text(json.dumps({"orders": [[str(op) for op in r] for r in SCHED.orders]}))
    assert read_schedule_file(unnamed).schedule.name == "unnamed"  # the file's stem
    table = tmp_path / "table.json"
    TABLE.dump(table)
    f = read_schedule_file(table)
    assert (f.path, f.kind, f.header, f.has_comms) == (table, "executor", [], True)
    assert f.table == TABLE and f.schedule.orders == SCHED.orders
    compute = tmp_path / "compute.csv"
    write_rows([[str(op) for op in r] for r in SCHED.orders], compute)
    f = read_schedule_file(compute, INST)
    assert (f.path, f.kind, f.table) == (compute, "torch-csv", None)
    assert f.schedule.orders == SCHED.orders
    comms = tmp_path / "comms.csv"
    write_rows(table_rows(TABLE), comms)
    f = read_schedule_file(comms)  # no instance: its compute order only
    assert (f.path, f.kind, f.table) == (comms, "torch-csv-comms", None)
    assert f.schedule.orders == SCHED.orders
    f = read_schedule_file(comms, INST)
    assert (f.path, f.kind, f.header) == (comms, "torch-csv-comms", [])
    assert f.table.actions == [[a for a in row] for row in _untimed(TABLE).actions]


def _untimed(table: ExecutorTable) -> ExecutorTable:
    from zbsolve.export.executor import Action

    rows = [[Action(a.kind, a.stage, a.mb, 0.0, 0.0, a.peer, a.peer_stage, a.batch)
             for a in row] for row in table.actions]
    return ExecutorTable(table.instance, table.placement, rows)


def test_read_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"orders": 3}')
    with pytest.raises(ScheduleFileError, match=rf"^{bad}: orders: expected a list"):
        read_schedule_file(bad)
    bad.write_text('{"orders": ')
    with pytest.raises(ValueError, match=rf"^{bad}: not valid JSON: line 1 column 12"):
        read_schedule_file(bad)
    with pytest.raises(ValueError, match=rf"^{tmp_path}: is a folder, not a file \(schedule file\)"):
        read_schedule_file(tmp_path)
    data = copy.deepcopy(TABLE.to_dict())
    data["ranks"][0]["actions"][0]["stage"] = "x"
    bad.write_text(json.dumps(data))
    with pytest.raises(JudgeError, match=rf"^{bad}: executor table: ranks/0/actions/0"):
        read_schedule_file(bad)


def test_table_sizes_are_bounded_and_malformed_tables_named(monkeypatch):
    data = copy.deepcopy(TABLE.to_dict())
    monkeypatch.setattr(size_limits, "MAX_DEVICES", 1)
    with pytest.raises(size_limits.SizeLimitError, match=r"^t.json: ranks: 2 is over the limit of 1$"):
        table_from_data(data, "t.json")
    monkeypatch.setattr(size_limits, "MAX_DEVICES", 1024)
    n = sum(len(r["actions"]) for r in data["ranks"])
    monkeypatch.setattr(size_limits, "MAX_OPS", (n - 1) // 3)
    with pytest.raises(size_limits.SizeLimitError, match=rf"^t.json: actions: {n} is over the limit of {3 * ((n - 1) // 3)}$"):
        table_from_data(data, "t.json")
    monkeypatch.setattr(size_limits, "MAX_OPS", n // 3 + 1)
    table_from_data(data, "t.json")  # at the limit: accepted
    broken = copy.deepcopy(data)
    broken["ranks"][0]["actions"][0]["peer"] = "x"  # compute actions may not carry a peer
    with pytest.raises(JudgeError, match=r"^t.json: executor table: ranks/0/actions/0"):
        table_from_data(broken, "t.json")


def test_header_errors_each_field():
    data = copy.deepcopy(TABLE.to_dict())
    assert header_errors(data) == []
    data.update(num_ranks=3, num_stages=5, microbatches=7)
    data["ranks"][1]["rank"] = 0
    data["ranks"][0]["stages"] = [1]
    assert header_errors(data) == [
        "header: num_ranks is 3 but the table lists 2 ranks",
        "header: num_stages is 5 but placement lists 2 stages",
        "header: microbatches is 7 but the embedded instance has 2",
        "header: ranks[0].stages is [1] but placement puts stages [0] on rank 0",
        "header: ranks[1] says rank 0",
    ]


def test_instance_errors_and_differences():
    t = copy.deepcopy(TABLE)
    assert instance_errors(t) == [] and instance_errors(t, INST) == []
    t.actions = t.actions + [[]]
    assert instance_errors(t) == ["embedded instance has 2 devices but the table has 3 ranks"]
    other = INST.with_(comm=0.25, microbatches=2, W=2.0, limit=(3.0, 3.0))
    assert instance_differences(INST, other) == [
        "the file was made for another instance than 'p2': times.W 1.0 x2 vs 2.0 x2; comm 0.5 "
        "vs 0.25; memory.limit None x2 vs 3.0 x2 (file vs instance); export it for this instance"]
    assert instance_differences(INST, make_instance(p=2, m=3, comm=0.5, activation=1.0,
                                                    weight=0.5))[0].startswith(
        "the file was made for another instance than 'instance': microbatches 2 vs 3 (")
    assert instance_differences(INST, INST.with_(name="renamed")) == []


def test_fused_flag_is_checked_only_against_an_i_right_before_its_own_w():
    from zbsolve.ops import Op
    from zbsolve.schedule import Schedule

    rows = [[Op("F", 0, 0), Op("F", 0, 1), Op("I", 0, 1), Op("I", 0, 0), Op("W", 0, 1),
             Op("W", 0, 0)],
            [Op("F", 1, 0), Op("B", 1, 0), Op("F", 1, 1), Op("B", 1, 1)]]
    table = lower(INST, Schedule(rows, "x"))
    table.fused_bw = True
    assert instance_errors(table) == []  # I then the W of another microbatch: nothing to fuse
    rows[0] = [Op("F", 0, 0), Op("F", 0, 1), Op("I", 0, 1), Op("I", 0, 0), Op("W", 0, 0),
               Op("W", 0, 1)]
    table = lower(INST, Schedule(rows, "x"))
    table.fused_bw = True
    assert instance_errors(table) == [
        "fused_bw is true but rank 0 runs 0I0 right before 0W0, which fusing would have made one B"]


def test_short_values():
    assert _short((1.0, 1.0)) == "1.0 x2"
    assert _short((1.0, 2.0)) == "[1.0, 2.0]"
    assert _short("loop") == "'loop'"
    assert _short(None) == "None"
    long = tuple(float(i) for i in range(30))
    text = _short(long)
    assert len(text) == 60 and text.endswith("...") and text.startswith("[0.0, 1.0,")
    exactly = "x" * 58  # repr adds quotes: 60 characters are kept whole
    assert _short(exactly) == repr(exactly)
    assert _short("x" * 59) == repr("x" * 59)[:57] + "..."


def test_summary_line_counts_the_rest():
    assert Verdict([]).summary_line() == "ok"
    assert Verdict(["a"]).summary_line() == "a"
    assert Verdict(["a", "b"]).summary_line() == "a (and 1 more problem)"
    assert Verdict(["a", "b", "c"]).summary_line() == "a (and 2 more problems)"
    with pytest.raises(JudgeError, match=r"^f.json is broken: a \(and 1 more problem\)$"):
        require_ok(Verdict(["a", "b"]), "f.json is broken")
    assert require_ok(Verdict([]), "x").ok


def test_problem_order_and_what_a_verdict_carries():
    t = copy.deepcopy(TABLE)
    t.placement = [1, 0]
    v = judge_table(t, header=["header: X"])
    assert v.problems[0].startswith("placement [1, 0] differs") and v.problems[-1] == "header: X"
    v = judge_table(t, header=["header: X"], header_first=True)
    assert v.problems[0] == "header: X" and v.sim is None and v.reports == []
    broken = copy.deepcopy(TABLE)
    broken.actions[1] = [a for a in broken.actions[1] if a.kind != "RECV_F"]
    v = judge_table(broken)
    assert v.sim is not None and v.sim.makespan > 0 and v.reports == []
    assert v.problems[0].startswith("p2p: rank 1 position 0 (1F0): needs 1RECV_F0")
    ok = judge_table(TABLE)
    assert ok.ok and [r.transfers for r in ok.reports] == [4, 4] and ok.sim.makespan > 0


def test_memory_is_a_problem_only_where_asked(tmp_path, capsys):
    tight = copy.deepcopy(TABLE.to_dict())
    tight["instance"]["memory"]["limit"] = 1.5  # 1F1B keeps 2 activations on rank 0
    table = ExecutorTable.from_dict(tight)
    assert judge_table(table).ok  # check prints memory itself
    assert judge_table(table, allow_over_memory=False).problems == [
        "memory: device 0 exceeds its memory limit 1.5: reaches 2 at t=1 when 0F1 starts "
        "(over by 0.5); its peak is 2"]
    path, inst_path = tmp_path / "t.json", tmp_path / "i.json"
    path.write_text(json.dumps(tight))
    INST.with_(limit=(1.5, 1.5)).dump(inst_path)
    assert main(["check", str(inst_path), str(path)]) == 1
    out = capsys.readouterr().out
    assert "MEMORY: device 0 exceeds its memory limit 1.5" in out
    f = read_schedule_file(path)
    assert judge(INST.with_(limit=(1.5, 1.5)), f).ok


def test_plain_schedules_are_judged_by_the_simulator_alone(tmp_path):
    from zbsolve.simulate import simulate

    path = tmp_path / "plain.json"
    SCHED.dump(path)
    v = judge(INST, read_schedule_file(path))
    assert v.problems == [] and v.ok and v.reports == []
    assert v.sim.makespan == simulate(INST, SCHED).makespan


def test_static_errors_are_ranked_root_cause_first():
    from zbsolve.export.judge import _static_rank

    ranks = [_static_rank(e) for e in (
        "rank 1 position 0 (0SEND_F0): stage 0 lives on rank 0",
        "rank 0 position 2 (0SEND_F0): duplicate of rank 0 position 1",
        "rank 0 position 1 (0SEND_F0): peer should be stage 1 on rank 1, table says ...",
        "rank 1 position 3 (1SEND_B0): no matching producer/consumer/peer action",
        "rank 1 position 1 (1F0): its RECV is at position 2, after it",
        "rank 1 position 1 (1RECV_F1): batch 1, expected 0 (one batch per run ...)",
    )]
    assert ranks == [0, 1, 2, 3, 4, 5]


def test_table_reading_defaults_and_guards(monkeypatch):
    with pytest.raises(JudgeError, match=r"^executor table: executor table: ranks/0"):
        bad = copy.deepcopy(TABLE.to_dict())
        bad["ranks"] = [3]  # not an object: refused by the schema, not by a crash
        table_from_data(bad)

    def broken(data):
        raise KeyError("x")

    monkeypatch.setattr(ExecutorTable, "from_dict", staticmethod(broken))
    with pytest.raises(JudgeError, match=r"^t.json: malformed table: KeyError: 'x'$"):
        table_from_data(copy.deepcopy(TABLE.to_dict()), "t.json")


def test_short_of_a_single_value():
    assert _short((2.0,)) == "2.0 x1"


def test_reference_runs_two_steps_by_default():
    pytest.importorskip("torch")
    from zbsolve.runtime.model import GPTConfig
    from zbsolve.runtime.reference import run_reference

    cfg = GPTConfig.preset("gpt-tiny", layers=1, hidden=8, heads=2, seq=4, vocab=16,
                           microbatch_size=1)
    assert len(run_reference(cfg, 1).steps) == 2


def test_judge_passes_on_the_files_table_header_and_the_instance(tmp_path):
    # an executor table whose header disagrees with its body: read, kept, and judged as a problem
    data = copy.deepcopy(TABLE.to_dict())
    data["num_ranks"] = 3
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    f = read_schedule_file(path)
    assert f.header == ["header: num_ranks is 3 but the table lists 2 ranks"]
    assert judge(INST, f).problems == ["header: num_ranks is 3 but the table lists 2 ranks"]
    # a good table judged against another instance: the instance given is compared
    good = tmp_path / "good.json"
    TABLE.dump(good)
    other = INST.with_(comm=0.25)
    want = ["the file was made for another instance than 'p2': comm 0.5 vs 0.25 (file vs "
            "instance); export it for this instance"]
    assert judge(other, read_schedule_file(good)).problems == want
    assert judge_table(TABLE, other).problems == want and judge_table(TABLE, INST).ok
    # a CSV with communication: its rows' problems come first, then the layout built from them
    comms = tmp_path / "comms.csv"
    write_rows(table_rows(TABLE), comms)
    p3 = make_instance(p=3, m=2, comm=0.5, activation=1.0, weight=0.5, name="p3")
    f = read_schedule_file(comms, p3)
    assert f.header == ["comms.csv: 2 rows (ranks) but the instance has 3 devices"]
    assert f.schedule.orders == SCHED.orders
    assert judge(p3, f).problems == ["comms.csv: 2 rows (ranks) but the instance has 3 devices",
                                     "embedded instance has 3 devices but the table has 2 ranks"]


def test_a_plain_schedule_the_simulator_rejects_is_one_compute_order_problem(tmp_path):
    from zbsolve.schedule import Schedule

    rows = [list(r) for r in SCHED.orders]
    rows[0] = [op for op in rows[0] if str(op) != "0F1"]
    path = tmp_path / "short.json"
    Schedule(rows, "short").dump(path)
    v = judge(INST, read_schedule_file(path))
    assert v.problems == ["compute order: 1 missing op(s): 0F1"] and v.sim is None


def test_layout_and_instance_differences_are_all_listed_layout_first(tmp_path):
    t = copy.deepcopy(TABLE)
    t.placement = [1, 0]
    other = INST.with_(comm=0.25)
    assert instance_errors(t, other) == [
        "placement [1, 0] differs from the embedded instance's [0, 1]",
        "the file was made for another instance than 'p2': comm 0.5 vs 0.25 (file vs instance); "
        "export it for this instance"]
    # a JSON table's embedded instance is its root: the layout before the header's counts
    data = copy.deepcopy(t.to_dict())
    data["num_ranks"] = 3
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert judge(INST, read_schedule_file(path)).problems == [
        "placement [1, 0] differs from the embedded instance's [0, 1]",
        "header: num_ranks is 3 but the table lists 2 ranks"]


def test_the_static_check_runs_once_per_judgement(monkeypatch):
    """``judge_table`` hands its static errors (none, by then) to both matching simulations
    rather than letting each recompute them: one pass over the table, not three."""
    from zbsolve.export import p2p_check

    calls = []
    original = p2p_check.static_errors

    def counted(table):
        calls.append(table)
        return original(table)

    monkeypatch.setattr(p2p_check, "static_errors", counted)
    verdict = judge_table(TABLE)
    assert verdict.ok and [r.mode for r in verdict.reports] == ["blocking", "batched"]
    assert calls == [TABLE]
