"""The command line keeps its promises: --json everywhere (errors too), usage per subcommand,
defaults in the help, --version, python -m zbsolve, schedules that carry their instance,
--memory-margin, new output folders, "not measured" memory."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import INSTANCES, ROOT

import zbsolve
from zbsolve.baselines import generate
from zbsolve.cli import COMMANDS, build_parser, main
from zbsolve.cli.common import new_output_dir
from zbsolve.instance import load_instance

TEACHING = str(INSTANCES / "seed" / "teaching-p4-m8.yaml")
# the smallest argument list each subcommand parses (nothing runs)
MINIMAL = {
    "baselines": [TEACHING], "solve": [TEACHING], "check": ["s.json"], "show": ["s.json"],
    "export": ["s.json", "--format", "executor", "-o", "t.json"], "run": ["t.json"],
    "profile": ["--devices", "2", "--microbatches", "4", "-o", "i.yaml"], "loop": [],
    "sweep": [TEACHING, "-o", "out"], "bench": [], "plan": ["--gpus", "8", "--global-batch", "8"],
}


def _json_out(capsys) -> tuple[dict | list, str]:
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def _solved(tmp_path: Path, *extra: str) -> Path:
    path = tmp_path / "s.json"
    assert main(["solve", TEACHING, "-o", str(path), "--time-limit", "5", "--workers", "1",
                 "--seed", "0", *extra]) == 0
    return path


# ------------------------------------------------------------------ --json everywhere
def test_every_subcommand_takes_json():
    parser = build_parser()
    assert set(MINIMAL) == set(COMMANDS)
    for name in COMMANDS:
        args = parser.parse_args([name, *MINIMAL[name], "--json"])
        assert args.json is True, name


def test_json_answers_of_show_export_and_bench(tmp_path, capsys):
    solved = _solved(tmp_path)
    capsys.readouterr()
    assert main(["show", str(solved), "-o", str(tmp_path / "t.png"), "--json"]) == 0
    shown, _ = _json_out(capsys)
    assert shown["written"] == [str(tmp_path / "t.png")] and shown["instance"] == "teaching-p4-m8"
    assert main(["export", str(solved), "--format", "executor", "-o", str(tmp_path / "t.json"),
                 "--json"]) == 0
    exported, _ = _json_out(capsys)
    assert exported["format"] == "executor" and exported["compute_ops"] == 96
    assert exported["p2p_checks"] == ["blocking", "batched"] and exported["makespan"] == 27
    assert main(["bench", "--list", "--cases", "small", "--json"]) == 0
    listed, _ = _json_out(capsys)
    assert [c["case"] for c in listed][:2] == ["small/teaching-p4-m8", "small/teaching-p4-m16"]
    assert {c["time_limit"] for c in listed} == {60.0}
    assert main(["bench", "--list", "--cases", "small,random/random-01", "--small-limit", "20",
                 "--time-limit", "7", "--json"]) == 0
    listed, _ = _json_out(capsys)
    assert {c["time_limit"] for c in listed} == {20.0} and listed[-1]["case"] == "random/random-01"


def test_errors_under_json_are_one_json_object_on_stdout(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: 4\nmicrobatches: 8\ntimes: {F: 1, I: 1, W: 0}\n")
    sched = tmp_path / "gpipe.json"
    generate("gpipe", load_instance(TEACHING)).dump(sched)
    for argv in (["baselines", str(bad)], ["solve", str(bad)], ["check", str(bad), str(sched)],
                 ["sweep", str(bad), "-o", str(tmp_path / "sw")]):
        assert main([*argv, "--json"]) == 2
        err, stderr = _json_out(capsys)
        assert err["command"] == argv[0] and "times.W[0]: must be > 0" in err["error"]
        assert stderr == ""
    # an argument error is JSON too, with the subcommand's usage
    with pytest.raises(SystemExit) as exit_:
        main(["solve", TEACHING, "--json", "--time-limit", "-1"])
    assert exit_.value.code == 2
    err, stderr = _json_out(capsys)
    assert err["command"] == "solve" and "argument --time-limit: expected a number > 0" in err["error"]
    assert err["usage"].startswith("usage: zbsolve solve") and stderr == ""
    # a schedule without its instance
    plain = tmp_path / "plain.json"
    generate("1f1b", load_instance(TEACHING)).dump(plain)
    assert main(["export", str(plain), "--format", "executor", "-o", str(tmp_path / "x.json"),
                 "--json"]) == 2
    err, _ = _json_out(capsys)
    assert err == {"command": "export", "error": err["error"]}
    assert err["error"].startswith("--instance: required for this schedule file")


def test_without_json_errors_are_one_line_on_stderr(tmp_path, capsys):
    assert main(["check", TEACHING, str(tmp_path / "missing.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("zbsolve check: error:")


# ------------------------------------------------------------------ usage, help, version
@pytest.mark.parametrize("argv, words", [
    (["solve", TEACHING, "--bogus"], "unrecognized arguments: --bogus"),
    (["solve"], "the following arguments are required: instance"),
    (["solve", TEACHING, "--memory-margin", "1"], "argument --memory-margin: expected a fraction"),
    (["sweep", TEACHING], "the following arguments are required: -o/--out"),
    (["check"], "the following arguments are required: SCHEDULE"),
])
def test_a_subcommand_prints_its_own_usage_on_argument_errors(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zbsolve {argv[0]}: error: {words}") and err.count("\n") == 1
    assert f"(usage: zbsolve {argv[0]} " in err


def test_every_flag_has_help_that_names_its_default():
    for name, sub in build_parser().commands.items():
        text = sub.format_help()
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = action.option_strings[-1]
            assert action.help, f"{name} {flag}: no help"
            if isinstance(action, argparse._StoreTrueAction) or action.required:
                continue
            if action.default is None:
                assert "default" in action.help, f"{name} {flag}: what happens without it?"
            else:
                assert "default" in sub._get_formatter()._format_action(action), (name, flag)
        assert "--json" in text


def test_version_and_python_dash_m(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"zbsolve {zbsolve.__version__}"
    assert version("zbsolve") == zbsolve.__version__  # pyproject reads it from the package
    out = subprocess.run([sys.executable, "-m", "zbsolve", "baselines", TEACHING, "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert {r["name"] for r in json.loads(out.stdout)} == {"gpipe", "1f1b", "zb-h1", "zb-h2"}
    bad = subprocess.run([sys.executable, "-m", "zbsolve", "solve"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "usage: zbsolve solve" in bad.stderr


# ------------------------------------------------------------------ schedules with their instance
def test_check_and_show_take_a_schedule_without_its_instance(tmp_path, capsys):
    solved = _solved(tmp_path)
    capsys.readouterr()
    assert main(["check", str(solved), "--json"]) == 0
    alone, _ = _json_out(capsys)
    assert main(["check", TEACHING, str(solved), "--json"]) == 0  # the old two-argument form
    both, _ = _json_out(capsys)
    assert main(["check", str(solved), "--instance", TEACHING, "--json"]) == 0
    option, _ = _json_out(capsys)
    assert alone == both == option and alone["makespan"] == 27 and alone["valid"]
    assert main(["show", str(solved), "-o", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 10_000
    table = tmp_path / "t.json"
    assert main(["export", str(solved), "--format", "executor", "-o", str(table)]) == 0
    assert main(["check", str(table)]) == 0 and main(["show", str(table), "-o",
                                                       str(tmp_path / "b.png")]) == 0
    capsys.readouterr()
    assert main(["check", TEACHING, str(solved), "--instance", TEACHING]) == 2
    assert "INSTANCE and --instance both given" in capsys.readouterr().err
    csv = tmp_path / "s.csv"
    assert main(["export", str(solved), "--format", "torch-csv", "-o", str(csv)]) == 0
    capsys.readouterr()
    assert main(["check", str(csv)]) == 2  # a torch CSV carries no instance
    assert "--instance: required for this schedule file" in capsys.readouterr().err


# ------------------------------------------------------------------ --memory-margin
def test_memory_margin_solves_under_the_reduced_limit_and_records_it(tmp_path, capsys):
    inst = load_instance(TEACHING).with_(limit=(4.0,) * 4)
    path = tmp_path / "four.yaml"
    inst.dump(path)
    out = tmp_path / "s.json"
    capsys.readouterr()
    assert main(["solve", str(path), "-o", str(out), "--time-limit", "5", "--workers", "1",
                 "--memory-margin", "0.25", "--json"]) == 0
    answer, _ = _json_out(capsys)
    assert answer["memory_margin"] == {"fraction": 0.25, "limit_given": [4.0] * 4,
                                       "limit_solved": [3.0] * 4}
    meta = json.loads(out.read_text())["meta"]
    assert meta["memory_margin"] == answer["memory_margin"]
    assert meta["instance"]["memory"]["limit"] == 3.0  # what it was solved (and is checked) for
    assert main(["check", str(out), "--json"]) == 0
    checked, _ = _json_out(capsys)
    assert max(checked["peak_memory"]) <= 3.0 and checked["feasible"]
    # without the margin the solver may use all 4 (ZB-H1 does, and is faster)
    assert main(["solve", str(path), "--time-limit", "5", "--workers", "1", "--json"]) == 0
    free, _ = _json_out(capsys)
    assert free["objective_value"] < answer["objective_value"] and free["memory_margin"] is None


# ------------------------------------------------------------------ outputs never overwrite
def test_new_output_dir_is_new_and_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = new_output_dir("zbsolve-bench")
    assert first.parent == tmp_path and first.name.startswith("zbsolve-bench-")
    first.mkdir()
    second = new_output_dir("zbsolve-bench")
    assert second != first and not second.exists()


def test_bench_writes_a_new_folder_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert build_parser().parse_args(["bench"]).out is None
    assert build_parser().parse_args(["loop"]).output is None
    assert main(["bench", "--cases", "small/teaching-p4-m8", "--quick", "--workers", "1",
                 "--json"]) == 0
    answer, progress = _json_out(capsys)
    folders = list(tmp_path.glob("zbsolve-bench-*"))
    assert len(folders) == 1 and answer["files"][0] == str(folders[0] / "bench-quick.csv")
    assert answer["meet_goal"] == 1 and "[1/1] small/teaching-p4-m8" in progress


@pytest.mark.torch
def test_loop_writes_a_new_folder_by_default(tmp_path, monkeypatch, capsys):
    import zbsolve.profiler.loop as loop

    seen = {}

    def fake_run_loop(cfg, opts, out_dir, command):
        seen["out"] = Path(out_dir)
        return {"rows": []}

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loop, "run_loop", fake_run_loop)
    assert main(["loop", "--json"]) == 0
    assert seen["out"].parent == tmp_path and seen["out"].name.startswith("zbsolve-loop-")


# ------------------------------------------------------------------ run: memory not measured
def _report(engine: str) -> dict:
    return {
        "schedule": "zb-h1", "ranks": 2, "backend": "gloo", "device": "cpu", "stages": 2,
        "microbatches": 4, "engine": engine, "steps": 2, "note": "CPU run", "model_preset": "t",
        "model": {"layers": 2, "hidden": 8, "heads": 2, "seq": 4, "vocab": 16,
                  "microbatch_size": 1},
        "losses": [1.0, 0.9], "reference_losses": [1.0, 0.9],
        "timing": {"step": 1, "step_ms": 5.0, "mean_ms": {}, "predicted_makespan": 9.0},
        "peak_activation_bytes": [0, 0], "cuda_max_memory_allocated": [None, None],
        "predicted": {"peak_memory": [2.0, 1.0]},
    }


def test_torch_engine_memory_prints_not_measured(capsys):
    from zbsolve.cli.run import mark_unmeasured, print_report

    report = mark_unmeasured(_report("torch"))
    assert report["peak_activation_bytes"] == [None, None] and not report["memory_measured"]
    print_report(report)
    out = capsys.readouterr().out
    assert "peak tracked activation memory per rank: not measured (engine torch" in out
    assert "0.000" not in out
    ours = mark_unmeasured({**_report("ours"), "peak_activation_bytes": [2**20, 2**21]})
    print_report(ours)
    assert "per rank (MiB): 1.000, 2.000" in capsys.readouterr().out
