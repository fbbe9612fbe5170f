"""The foundation's CLI: baselines table/JSON, check on every schedule format, clean errors."""

from __future__ import annotations

import json

from conftest import INSTANCES

from zbsolve.baselines import generate
from zbsolve.cli import main
from zbsolve.instance import load_instance

TEACHING = str(INSTANCES / "seed" / "teaching-p4-m8.yaml")
FIELDS = {"name", "makespan", "span", "bubble_makespan", "bubble_span", "peak_memory", "feasible"}


def test_baselines_json_lists_every_applicable_family(capsys):
    assert main(["baselines", TEACHING, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"gpipe", "1f1b", "zb-h1", "zb-h2"}
    for r in rows:
        assert FIELDS <= set(r)
    assert by_name["gpipe"]["makespan"] == 33 and by_name["1f1b"]["makespan"] == 33
    assert by_name["1f1b"]["peak_memory"] == [4, 3, 2, 1]
    assert by_name["zb-h1"]["makespan"] == 27 and by_name["zb-h2"]["span"] == 24


def test_baselines_table_and_not_applicable_line(capsys):
    assert main(["baselines", TEACHING, "--all"]) == 0
    out = capsys.readouterr().out
    assert "1f1b" in out and "33.0000" in out and "0.2727" in out
    assert "not applicable: 1f1b-interleaved (needs chunks >= 2" in out


def test_check_json_and_memory_verdict(tmp_path, capsys):
    inst = load_instance(TEACHING)
    path = tmp_path / "gpipe.json"
    generate("gpipe", inst).dump(path)
    assert main(["check", TEACHING, str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["makespan"] == 33 and report["feasible"]
    tight = tmp_path / "tight.yaml"
    inst.with_(limit=(6.0,) * 4).dump(tight)
    assert main(["check", str(tight), str(path)]) == 1
    assert "MEMORY: device 0 exceeds its memory limit 6" in capsys.readouterr().out


def test_bad_inputs_are_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: 4\nmicrobatches: 8\ntimes: {F: 1, I: 1, W: 0}\n")
    assert main(["baselines", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zbsolve baselines: error:") and "times.W[0]: must be > 0" in err
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps({"orders": [["0F0", "0X0"], [], [], []]}))
    assert main(["check", TEACHING, str(sched)]) == 2
    assert "orders[0][1]: bad op token '0X0'" in capsys.readouterr().err


def test_export_takes_the_instance_a_solved_schedule_carries(tmp_path, capsys):
    solved = tmp_path / "s.json"
    assert main(["solve", TEACHING, "-o", str(solved), "--time-limit", "5", "--workers", "1"]) == 0
    table = tmp_path / "t.json"
    assert main(["export", str(solved), "--format", "executor", "-o", str(table)]) == 0
    assert main(["export", str(table), "--format", "torch-csv", "-o", str(tmp_path / "t.csv")]) == 0
    assert (tmp_path / "t.csv").read_text().startswith("0F0,")
    plain = tmp_path / "plain.json"
    generate("1f1b", load_instance(TEACHING)).dump(plain)
    capsys.readouterr()
    assert main(["export", str(plain), "--format", "executor", "-o", str(tmp_path / "x.json")]) == 2
    assert "--instance: required for this schedule file" in capsys.readouterr().err


def test_solve_start_is_a_floor_and_a_bad_start_is_refused(tmp_path, capsys):
    """``--start``: the answer is never worse than the schedule given, even when the solve has no
    time to find it (without the start, 0.01 s gives the serial fallback, 7454.88); a start that
    does not fit the instance is refused before any work, in one line."""
    default = str(INSTANCES / "default.yaml")
    start = tmp_path / "zb-h1.json"
    generate("zb-h1", load_instance(default)).dump(start)
    args = ["solve", default, "--time-limit", "0.01", "--workers", "1", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["objective_value"] > 7000
    assert main([*args, "--start", str(start)]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["start"] == {"name": "zb-h1", "value": 1310.49}
    assert answer["objective_value"] <= 1310.49 and answer["source"] == "hint:zb-h1"
    assert main(["solve", TEACHING, "--start", str(start)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a schedule of teaching-p4-m8" in err
    assert main(["solve", default, "--start", str(start), "--fused-backward"]) == 2
    assert "has split backwards (I, W); --fused-backward needs" in capsys.readouterr().err
    tight = tmp_path / "tight.yaml"
    load_instance(default).with_(limit=(5.0,) * 8).dump(tight)
    assert main(["solve", str(tight), "--start", str(start)]) == 2
    assert "exceeds the memory limit of" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_quietly(monkeypatch, capsys):
    # `zbsolve baselines X --json | head` once ended in two BrokenPipeError tracebacks: the
    # handler for OSError tried to print its one line to the same closed pipe
    import sys

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["baselines", TEACHING, "--json"]) == 141
    assert capsys.readouterr().err == ""
