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
