"""Every bad input is one line naming the file and the field, before any work; outputs are
checked before the work; sizes are bounded (the limits live in zbsolve.size_limits)."""

from __future__ import annotations

import datetime
import json

import pytest
from conftest import INSTANCES, make_instance

from zbsolve import size_limits
from zbsolve.baselines import generate
from zbsolve.cli import main
from zbsolve.export.files import load_schedule
from zbsolve.instance import InstanceError, load_instance

TEACHING = INSTANCES / "seed" / "teaching-p4-m8.yaml"
BASE = load_instance(TEACHING).to_dict()


def _cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return code, err.strip()


def _json(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# ------------------------------------------------------------------ instances
def test_json_instances_are_read_as_json_and_yaml_numbers_as_numbers(tmp_path):
    data = {**BASE, "times": {"F": 6e-05, "I": 1e-4, "W": 5e-05}}
    inst = load_instance(_json(tmp_path, "i.json", data))
    assert inst.F[0] == 6e-05  # PyYAML's YAML 1.1 reads the JSON text "6e-05" as a string
    y = tmp_path / "i.yaml"
    y.write_text("devices: 2\nmicrobatches: 2\ntimes: {F: 6e-05, I: 1e3, W: 1.0e+2}\n"
                 "meta: {date: 2024-01-01, ok: yes}\n")
    inst = load_instance(y)
    assert (inst.F[0], inst.I[0], inst.W[0]) == (6e-05, 1000.0, 100.0)
    assert inst.extra["meta"] == {"date": "2024-01-01", "ok": "yes"}  # JSON data only


def test_instance_extras_must_be_json_data():
    data = {**BASE, "meta": {"when": datetime.date(2024, 1, 1)}}
    with pytest.raises(InstanceError, match=r"meta.when: a date is not JSON data \(write it as a string\)"):
        load_instance(data)


@pytest.mark.parametrize("text, words", [
    ('{"devices": 4, "devices": 2}', "i.json: duplicate key 'devices' in a JSON object"),
    ('{"devices": 4,\n  "times": }', "i.json: not valid JSON: line 2 column 12: Expecting value"),
    ('{"devices": NaN}', "i.json: NaN is not a JSON number"),
    ("[1, 2]", "i.json: expected a mapping of instance fields at the top level, got list"),
])
def test_bad_json_instance_names_file_and_place(tmp_path, capsys, text, words):
    code, err = _cli(["baselines", _json(tmp_path, "i.json", text)], capsys)
    assert code == 2 and words in err, err


def test_duplicate_yaml_key_is_an_error(tmp_path, capsys):
    path = tmp_path / "i.yaml"
    path.write_text(TEACHING.read_text() + "devices: 2\n")
    code, err = _cli(["baselines", path], capsys)
    assert code == 2 and "i.yaml: not valid YAML: line" in err and "duplicate key 'devices'" in err


@pytest.mark.parametrize("change, words", [
    ({"memory": {"activation": 1.0e300}}, "memory.activation[0]: 1e+300 is outside [1e-12, 1e+15]"),
    ({"times": {"F": 1e-300, "I": 1e-300, "W": 1e-300}}, "times.F[0]: 1e-300 is outside [1e-12, 1e+15]"),
    ({"times": {"F": 1e-6, "I": 1e4, "W": 1}}, "times: the largest (10000) is more than 1e+09 times"),
    ({"comm": 1e20}, "comm[0]: 1e+20 is outside"),
    ({"devices": 100000}, "devices: 100,000 is over the limit of 1,024"),
    ({"microbatches": 10**9}, "microbatches: 1,000,000,000 is over the limit of 65,536"),
    ({"devices": 1000, "microbatches": 1000}, "ops (3*stages*microbatches): 3,000,000 is over the limit of 1,000,000"),
    ({"chunks": 65}, "chunks: 65 is over the limit of 64"),
    ({"name": ["x"]}, "name: expected a string"),
])
def test_values_and_sizes_are_bounded_before_any_work(tmp_path, capsys, change, words):
    data = {**BASE, **change}
    code, err = _cli(["baselines", _json(tmp_path, "i.json", data)], capsys)
    assert code == 2 and f"i.json: {words}" in err, err


def test_stages_of_is_a_precomputed_map():
    inst = make_instance(p=1024, m=1, v=2, placement="v")
    assert inst.stages_of(0) == [0, 2047] and inst.stages_of(1023) == [1023, 1024]
    assert all(len(inst.stages_of(d)) == 2 for d in range(1024))
    assert inst._by_device[5] == (5, 2042)
    explicit = make_instance(p=2, m=1, v=2, placement=[1, 0, 0, 1])
    assert explicit.stages_of(0) == [1, 2] and explicit.stages_of(1) == [0, 3]


def test_inputs_that_are_not_files(tmp_path, capsys):
    code, err = _cli(["baselines", tmp_path], capsys)
    assert code == 2 and err.endswith(f"{tmp_path}: is a folder, not a file (instance file)")
    code, err = _cli(["check", TEACHING, tmp_path], capsys)
    assert code == 2 and err.endswith(f"{tmp_path}: is a folder, not a file (schedule file)")
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00")
    code, err = _cli(["check", TEACHING, binary], capsys)
    assert code == 2 and "b.json: not UTF-8 text" in err


# ------------------------------------------------------------------ schedules
@pytest.mark.parametrize("data, words", [
    ([["0F0"]], "s.json: schedule: expected a JSON object with 'orders', got a list"),
    (None, "s.json: schedule: expected a JSON object with 'orders', got null"),
    ({"orders": [[5]]}, "s.json: orders[0][0]: expected an op token string like '3F12', got 5"),
    ({"orders": [["0F0"]], "starts": [[None]]}, "s.json: starts[0][0]: expected a finite number, got None"),
    ({"orders": [["0F0"], ["1F0"]], "starts": [[0.0]]}, "s.json: starts: expected one list per device row (2), got 1"),
    ({"orders": [["0F0", "0B0"]], "starts": [[0.0]]}, "s.json: starts[0]: expected 2 numbers, got 1"),
    ({"format": "zbsolve-schedule", "version": 7, "orders": []}, "s.json: version: this zbsolve reads schedules of version 1, got 7"),
    ({"format": "other", "orders": []}, "s.json: format: expected 'zbsolve-schedule' (or an executor table), got 'other'"),
    ({"orders": [], "colour": 1}, "s.json: schedule: unknown key(s) ['colour']"),
    ({"orders": "0F0"}, "s.json: orders: expected a list of per-device lists of op tokens"),
    ({"orders": [["0F0"]], "meta": []}, "s.json: meta: expected an object, got list"),
])
def test_malformed_schedule_files(tmp_path, capsys, data, words):
    path = _json(tmp_path, "s.json", data)
    code, err = _cli(["check", TEACHING, path], capsys)
    assert code == 2 and err == f"zbsolve check: error: {words}" or words in err, err
    with pytest.raises(ValueError, match="s.json"):
        load_schedule(path)


# ------------------------------------------------------------------ flags
@pytest.mark.parametrize("argv, words", [
    (["solve", TEACHING, "--seed", "2147483648"], "argument --seed: expected an integer in [0, 2147483647], got 2147483648"),
    (["solve", TEACHING, "--workers", "0"], "argument --workers: expected an integer >= 1, got 0"),
    (["solve", TEACHING, "--time-limit", "nan"], "argument --time-limit: expected a finite number"),
    (["run", "t.json", "--rtol", "-1"], "argument --rtol: expected a number >= 0, got -1"),
    (["run", "t.json", "--nproc", "0"], "argument --nproc: expected an integer >= 1, got 0"),
    (["run", "t.json", "--timeout", "0"], "argument --timeout: expected a number > 0, got 0"),
    (["run", "t.json", "--threads", "0"], "argument --threads: expected an integer >= 1, got 0"),
    (["run", "t.json", "--lr", "nan"], "argument --lr: expected a finite number, got 'nan'"),
    (["profile", "--devices", "2", "--microbatches", "2", "--warmup", "-1", "-o", "x.yaml"],
     "argument --warmup: expected an integer >= 0, got -1"),
    (["profile", "--devices", "2", "--microbatches", "2", "--device", "tpu", "-o", "x.yaml"],
     "argument --device: expected cpu, cuda or cuda:N, got 'tpu'"),
    (["sweep", TEACHING, "-o", "x", "--jobs", "0"], "argument --jobs: expected an integer >= 1, got 0"),
    (["loop", "--threads", "0"], "argument --threads: expected an integer >= 1, got 0"),
])
def test_bad_flags_are_one_line(capsys, argv, words):
    code, err = _cli(argv, capsys)
    assert code == 2 and words in err, err
    assert err.startswith(f"zbsolve {argv[0]}: error: ")


# ------------------------------------------------------------------ outputs, before the work
@pytest.fixture
def no_solve(monkeypatch):
    import zbsolve.solver as solver

    def fail(*args, **kwargs):
        raise AssertionError("the solve must not start")

    monkeypatch.setattr(solver, "solve", fail)


def test_solve_output_problems_are_found_before_the_solve(tmp_path, capsys, no_solve):
    (tmp_path / "f").write_text("x")
    inst_json = tmp_path / "i.json"
    load_instance(TEACHING).dump(inst_json)
    cases = [
        (tmp_path, "is a folder; give a file name inside it"),
        (tmp_path / "f" / "below" / "s.json", "f is a file, not a folder"),
        ("/proc/zbsolve.json", "cannot write in /proc"),
        (tmp_path / "s.csv", "the file written is .json; name it so (e.g. s.json)"),
    ]
    for out, words in cases:
        code, err = _cli(["solve", TEACHING, "-o", out], capsys)
        assert code == 2 and words in err, err
    code, err = _cli(["solve", inst_json, "-o", inst_json], capsys)
    assert code == 2 and "is also an input of this command" in err
    assert json.loads(inst_json.read_text())["devices"] == 4  # untouched


def test_no_command_overwrites_its_input(tmp_path, capsys):
    inst = load_instance(TEACHING)
    sched = tmp_path / "s.json"
    generate("1f1b", inst).dump(sched)
    before = sched.read_bytes()
    for argv in (["export", sched, "--instance", TEACHING, "--format", "executor", "-o", sched],
                 ["export", sched, "--instance", TEACHING, "--format", "chrome-trace", "-o", sched],
                 ["show", TEACHING, tmp_path / "s.png", "-o", tmp_path / "s.png"]):
        code, err = _cli(argv, capsys)
        assert code == 2, err
    assert sched.read_bytes() == before
    code, err = _cli(["export", sched, "--instance", TEACHING, "--format", "torch-csv", "-o",
                      tmp_path / "t.json"], capsys)
    assert code == 2 and "the file written is .csv" in err


def test_show_refuses_above_its_op_limit(tmp_path, capsys):
    inst = make_instance(p=32, m=512, v=2)  # 98,304 ops
    path = tmp_path / "big.yaml"
    inst.dump(path)
    code, err = _cli(["show", path, tmp_path / "any.json", "-o", tmp_path / "x.png"], capsys)
    assert code == 2 and err.endswith(
        f"show: ops to draw: 98,304 is over the limit of {size_limits.MAX_SHOW_OPS:,}; draw a "
        "smaller instance (fewer microbatches)")


def test_instance_dump_name_picks_the_format(tmp_path):
    inst = load_instance(TEACHING)
    with pytest.raises(InstanceError, match="an instance file is .yaml, .yml or .json"):
        inst.dump(tmp_path / "i.txt")
    inst.dump(tmp_path / "i.json")
    assert json.loads((tmp_path / "i.json").read_text())["devices"] == 4


# ------------------------------------------------------------------ run
def test_run_never_builds_a_path_from_file_contents(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    import zbsolve.runtime.launch as launch
    from zbsolve.export.executor import lower

    inst = make_instance(p=2, m=2, comm=0.1)
    sched = generate("1f1b", inst)
    sched.name = "../owned"
    table = tmp_path / "t.json"
    lower(inst, sched).dump(table)
    seen = []
    monkeypatch.setattr(launch, "run_jobs", lambda jobs, world, opts: seen.extend(jobs) or [])
    assert main(["run", str(table), "--engine", "torch", "--layers", "2"]) == 0
    (job,) = seen
    assert job.torch_csv.endswith("/schedule.csv") and "owned" not in job.torch_csv
    assert not (tmp_path.parent / "owned.csv").exists()


def test_run_refuses_a_table_over_its_own_memory_limit(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    import zbsolve.runtime.launch as launch
    from zbsolve.export.executor import lower

    inst = make_instance(p=2, m=4, comm=0.1)
    table = lower(inst, generate("gpipe", inst)).to_dict()
    table["instance"]["memory"]["limit"] = 2  # gpipe keeps all 4 activations
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(launch, "run_jobs", lambda jobs, world, opts: [])
    code, err = _cli(["run", path, "--layers", "2"], capsys)
    assert code == 2 and "cannot run: memory: device 0 exceeds its memory limit 2" in err
    assert err.endswith("(run it anyway with --allow-over-memory)")
    assert main(["run", str(path), "--layers", "2", "--allow-over-memory"]) == 0
