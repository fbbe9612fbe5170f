"""check, export and show judge the communication a file contains (executor tables and
torch-csv-comms files), and the header against the instance, root cause first."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import make_instance

from zbsolve.baselines import generate
from zbsolve.cli import main
from zbsolve.export.executor import lower
from zbsolve.export.judge import read_schedule_file
from zbsolve.export.torch_csv import read_torch_csv_table, table_rows, write_rows

INST = make_instance(p=4, m=8, comm=0.5, activation=1.0, weight=0.5, name="p4")


@pytest.fixture
def files(tmp_path):
    inst_path = tmp_path / "p4.yaml"
    INST.dump(inst_path)
    table = lower(INST, generate("zb-h1", INST))
    table_path = tmp_path / "table.json"
    table.dump(table_path)
    csv_path = tmp_path / "comms.csv"
    write_rows(table_rows(table), csv_path)
    return inst_path, table_path, csv_path


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _first(data, rank, kind, mb=None):
    acts = data["ranks"][rank]["actions"]
    return next(i for i, a in enumerate(acts) if a["kind"] == kind and mb in (None, a["mb"]))


def _pop(rank, kind):
    return lambda d: d["ranks"][rank]["actions"].pop(_first(d, rank, kind))


def _set(rank, kind, **fields):
    return lambda d: d["ranks"][rank]["actions"][_first(d, rank, kind)].update(fields)


def _dup(d):
    acts = d["ranks"][0]["actions"]
    i = _first(d, 0, "SEND_F")
    acts.insert(i + 1, dict(acts[i]))


def _move(d):
    d["ranks"][2]["actions"].insert(0, d["ranks"][0]["actions"].pop(_first(d, 0, "SEND_F")))


def _swap(d):  # RECV_F of mb 1 before rank 1's first forward: it waits for what comes later
    acts = d["ranks"][1]["actions"]
    i, j = _first(d, 1, "RECV_F", 0), _first(d, 1, "RECV_F", 1)
    acts[i], acts[j] = acts[j], acts[i]


TABLE_DEFECTS = {
    "send without recv": (_pop(1, "RECV_F"),
                          "p2p: rank 1 position 0 (1F0): needs 1RECV_F0 from rank 0 but the rank has no such RECV"),
    "wrong peer": (_set(0, "SEND_F", peer=2),
                   "p2p: rank 0 position 1 (0SEND_F0): peer should be stage 1 on rank 1, table says stage 1 on rank 2"),
    "peer out of range": (_set(0, "SEND_F", peer=9),
                          "p2p: rank 0 position 1 (0SEND_F0): peer should be stage 1 on rank 1, table says stage 1 on rank 9"),
    "duplicate": (_dup, "p2p: rank 0 position 2 (0SEND_F0): duplicate of rank 0 position 1"),
    "comm on the wrong rank": (_move, "p2p: rank 2 position 0 (0SEND_F0): stage 0 lives on rank 0"),
    "mismatched order": (_swap, "p2p: rank 1 position 1 (1F0): its RECV is at position 2, after it"),
    "num_ranks": (lambda d: d.update(num_ranks=3), "header: num_ranks is 3 but the table lists 4 ranks"),
    "microbatches": (lambda d: d.update(microbatches=9), "header: microbatches is 9 but the embedded instance has 8"),
    "placement": (lambda d: d.update(placement=[0, 1, 3, 2]),
                  "placement [0, 1, 3, 2] differs from the embedded instance's [0, 1, 2, 3]"),
    "embedded instance": (lambda d: d["instance"]["times"].update(F=2),
                          "the file was made for another instance than 'p4': times.F 2.0 x4 vs 1.0 x4"),
    "rank listing": (lambda d: d["ranks"][1].update(stages=[2]),
                     "header: ranks[1].stages is [2] but placement puts stages [1] on rank 1"),
}


@pytest.mark.parametrize("defect", sorted(TABLE_DEFECTS))
def test_check_and_export_refuse_a_table_with_the_root_cause(files, tmp_path, capsys, defect):
    inst_path, table_path, _ = files
    edit, reason = TABLE_DEFECTS[defect]
    data = json.loads(table_path.read_text())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, out, err = _run(["check", inst_path, bad], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"zbsolve check: error: {bad} is not valid: {reason}"), err
    target = tmp_path / "out.json"
    code, _, err = _run(["export", bad, "--instance", inst_path, "--format", "executor", "-o",
                         target], capsys)
    assert code == 2 and f"cannot run as written: {reason}" in err
    assert not target.exists(), "broken comms must not be silently rebuilt"


def test_blocking_deadlock_in_the_file_is_named(files, tmp_path, capsys):
    inst_path, _, _ = files
    bad = tmp_path / "adjacent.json"
    lower(INST, generate("1f1b", INST), placement="adjacent").dump(bad, check=False)
    code, _, err = _run(["check", inst_path, bad], capsys)
    assert code == 2 and "is not valid: p2p blocking deadlock: rank 0 stuck at position" in err
    code, _, err = _run(["show", inst_path, bad, "-o", tmp_path / "x.png"], capsys)
    assert code == 2 and "cannot be shown: p2p blocking deadlock" in err


def test_a_good_table_and_comms_csv_are_judged_on_their_own_comms(files, capsys):
    inst_path, table_path, csv_path = files
    for path in (table_path, csv_path):
        code, out, _ = _run(["check", inst_path, path, "--json"], capsys)
        report = json.loads(out)
        assert code == 0 and report["valid"]
        assert [(r["mode"], r["ok"], r["transfers"]) for r in report["p2p"]] == [
            ("blocking", True, 48), ("batched", True, 48)]
    assert read_schedule_file(csv_path, INST).kind == "torch-csv-comms"
    code, out, _ = _run(["check", inst_path, table_path], capsys)
    assert "valid order; its own communication: p2p blocking ok, p2p batched ok (48 transfers)" in out


def _csv_edit(csv_path, tmp_path, fn):
    rows = [line.split(",") for line in csv_path.read_text().splitlines()]
    fn(rows)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return bad


CSV_DEFECTS = {
    "recv missing": (lambda rows: rows[1].remove("1RECV_F0"),
                     "p2p: rank 1 position 0 (1F0): needs 1RECV_F0 from rank 0 but the rank has no such RECV"),
    "comm token on the wrong row": (lambda rows: rows[2].insert(0, rows[0].pop(rows[0].index("0SEND_F0"))),
                                    "p2p: rank 2 position 0 (0SEND_F0): stage 0 lives on rank 0"),
    "peer out of range": (lambda rows: rows[3].append("3SEND_F0"), "p2p: rank 3 position"),
    "no REDUCE_GRAD": (lambda rows: rows[0].remove("0REDUCE_GRAD"),
                       "bad.csv: stage 0 has no 0REDUCE_GRAD (torch scales the gradients there"),
    "REDUCE_GRAD too early": (lambda rows: rows[0].insert(1, rows[0].pop(rows[0].index("0REDUCE_GRAD"))),
                              "bad.csv: 0REDUCE_GRAD at column 2 comes before the stage's last backward (0 of 8 done)"),
    "rows": (lambda rows: rows.pop(), "bad.csv: 3 rows (ranks) but the instance has 4 devices"),
    "stage on another row": (lambda rows: rows[1].insert(0, rows[0].pop(rows[0].index("0F0"))),
                             "bad.csv: stage 0 has compute ops on rows 0 and 1"),
}


@pytest.mark.parametrize("defect", sorted(CSV_DEFECTS))
def test_check_and_export_refuse_a_comms_csv_with_the_root_cause(files, tmp_path, capsys, defect):
    inst_path, _, csv_path = files
    edit, reason = CSV_DEFECTS[defect]
    bad = _csv_edit(csv_path, tmp_path, edit)
    code, _, err = _run(["check", inst_path, bad], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"zbsolve check: error: {bad} is not valid: {reason}"), err
    target = tmp_path / "out.csv"
    code, _, err = _run(["export", bad, "--instance", inst_path, "--format", "torch-csv", "-o",
                         target], capsys)
    assert code == 2 and reason in err and not target.exists()


def test_csv_table_reader_infers_peers_from_the_rows(files):
    _, table_path, csv_path = files
    table, header = read_torch_csv_table(csv_path, INST)
    assert header == [] and table.placement == [0, 1, 2, 3]
    want = json.loads(table_path.read_text())
    got = [[(a.kind, a.stage, a.mb, a.peer, a.peer_stage, a.batch) for a in row]
           for row in table.actions]
    expect = [[(a["kind"], a["stage"], a["mb"], a.get("peer"), a.get("peer_stage"), a.get("batch"))
               for a in r["actions"]] for r in want["ranks"]]
    assert got == expect


def test_compute_only_csv_and_schedule_json_are_judged_by_the_simulator(files, tmp_path, capsys):
    inst_path, _, _ = files
    sched = copy.deepcopy(generate("1f1b", INST))
    sched.orders[0].pop()
    path = tmp_path / "s.json"
    sched.dump(path)
    code, _, err = _run(["check", inst_path, path], capsys)
    assert code == 2 and "is not valid: compute order: 2 missing op(s): 0I7, 0W7" in err
