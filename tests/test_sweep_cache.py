"""The sweep cache is a claim, checked before use: entries are re-simulated, corrupt files are
reported and solved again, the key includes the code version; sizes are bounded; a sweep whose
cases failed does not exit 0."""

from __future__ import annotations

import json
import time

import pytest
from test_sweep import reference_solve, sweep, tiny

from zbsolve.cli import main
from zbsolve.instance import InstanceError
from zbsolve.sweep import cache, parse_limits, runner


def _entries(tmp_path):
    return sorted((tmp_path / "cache").glob("*.json"))


def test_key_includes_the_code_version(tmp_path, monkeypatch):
    inst = tiny()
    key = cache.case_key(inst, {"time_limit": 1})
    assert cache.code_version().startswith("0.1.0+")
    monkeypatch.setattr(cache, "code_version", lambda: "0.1.0+other")
    assert cache.case_key(inst, {"time_limit": 1}) != key


def test_corrupt_entry_is_reported_and_solved_again(tmp_path, capsys):
    first = sweep(tmp_path, limits="1.0")
    (path,) = _entries(tmp_path)
    path.write_text('{"row": {"limit"')  # cut short (say, by a full disk before this fix)
    capsys.readouterr()
    again = sweep(tmp_path, limits="1.0")
    err = capsys.readouterr().err
    assert f"zbsolve sweep: warning: ignoring cache entry ({path}: not valid JSON" in err
    assert "solving c1 limit 3 again" in err
    assert again.stats["solved"] == 1 and again.stats["cached"] == 0
    assert json.loads(path.read_text())["row"]["makespan"] == first.table.iloc[0]["makespan"]
    for bad in ("[]", '{"row": 3}', "null"):
        path.write_text(bad)
        assert sweep(tmp_path, limits="1.0").stats["solved"] == 1
        assert "not a cache entry" in capsys.readouterr().err


def test_entries_are_re_simulated_before_use(tmp_path, capsys):
    sweep(tmp_path, limits="1.0")
    (path,) = _entries(tmp_path)
    entry = json.loads(path.read_text())
    honest = entry["row"]["makespan"]
    entry["row"]["makespan"] = 1.0  # a claim the schedule does not back
    path.write_text(json.dumps(entry))
    again = sweep(tmp_path, limits="1.0")
    row = again.table[again.table["source"] == "solver"].iloc[0]
    assert row["cached"] and row["makespan"] == honest  # the simulator's figure, not the file's
    # a schedule that does not fit the case's limit is not used
    from zbsolve.baselines import generate

    entry["schedule"] = generate("gpipe", tiny()).to_dict()  # peak 4 > limit 3
    path.write_text(json.dumps(entry))
    capsys.readouterr()
    again = sweep(tmp_path, limits="1.0")
    assert "its schedule does not pass the simulator" in capsys.readouterr().err
    assert again.stats["solved"] == 1
    # an "infeasible" claim must name a smallest feasible limit above the case's
    entry = json.loads(path.read_text())
    entry.update(schedule=None)
    entry["row"].update(status="infeasible", min_limit=2.0)
    path.write_text(json.dumps(entry))
    assert sweep(tmp_path, limits="1.0").stats["solved"] == 1
    assert "without a schedule must be an infeasible limit" in capsys.readouterr().err


def test_limits_are_counted_before_they_are_listed():
    t0 = time.perf_counter()
    with pytest.raises(InstanceError, match=r"--limits: 1,500,000,000,001 limits is over the limit of 1,000"):
        parse_limits("0.5:2:1e-12")
    with pytest.raises(InstanceError, match="over the limit of 1,000"):
        parse_limits(",".join(["1"] * 1001))
    assert time.perf_counter() - t0 < 5  # refused, not enumerated (a bound, not a benchmark)


def broken(inst, params, hints):
    raise RuntimeError("solver blew up")


def test_every_case_failing_exits_non_zero(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "solve_with_zbsolve", broken)
    path = tmp_path / "tiny.yaml"
    tiny().dump(path)
    argv = ["sweep", str(path), "--limits", "1,1.5", "-o", str(tmp_path / "o"), "--no-progress",
            "--no-plot"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "zbsolve sweep: 2 of 2 case(s) failed" in err
    assert not list((tmp_path / "o" / "cache").glob("*.json"))
    monkeypatch.setattr(runner, "solve_with_zbsolve", reference_solve)
    assert main(argv) == 0  # retried, not cached as failures


def test_sweep_output_problems_are_found_first(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    tiny().dump(path)
    (tmp_path / "file").write_text("x")
    assert main(["sweep", str(path), "-o", str(tmp_path / "file")]) == 2
    assert "-o " + str(tmp_path / "file") + ": is a file; give a folder" in capsys.readouterr().err
    assert main(["sweep", str(path), "-o", str(tmp_path / "o"), "--limits", "0.5:2:1e-12"]) == 2
    assert "over the limit of 1,000 per sweep" in capsys.readouterr().err
