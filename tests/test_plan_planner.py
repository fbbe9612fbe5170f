"""zbsolve plan end to end on a small model: the split beats both rules, the JSON, bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from zbsolve.cli import main
from zbsolve.plan.accelerators import accelerator
from zbsolve.plan.planner import ChunkLayout, PlanConfig, plan
from zbsolve.plan.report import jsonable, plan_dict
from zbsolve.plan.shapes import family
from zbsolve.schedule import Schedule
from zbsolve.simulate import validate

# a Llama-style model whose vocabulary head weighs more than all its blocks together
SHAPE = dict(layers=8, hidden=512, heads=8, seq=256, vocab=32000)
FLAGS = ["--hf", "llama", "--layers", "8", "--hidden", "512", "--heads", "8", "--seq", "256",
         "--vocab", "32000", "--gpus", "4", "--gpu", "h100", "--global-batch", "16",
         "--microbatch-size", "1", "--chunks", "1", "--time-limit", "60", "--jobs", "1"]


def _plan(**kw):
    cfg = PlanConfig(accelerator("h100"), 4, 16, model=family("llama", **SHAPE),
                     microbatch_size=1, layouts=[ChunkLayout(1)], time_limit=60,
                     backend="inline", candidates=3, **kw)
    return plan(cfg)


@pytest.fixture(scope="module")
def result():
    return _plan()


def test_the_split_found_beats_both_rules_at_equal_memory(result):
    data = jsonable(plan_dict(result))
    assert data["split"] == [2, 3, 4, 1] and data["blocks_per_stage"] == [1, 3, 4, 0]
    rules = data["rules"]
    assert rules["torchtitan"]["split"] == [3, 3, 2, 2]
    assert rules["zero-bubble"]["split"] == [3, 2, 2, 3]
    for rule in rules.values():
        assert rule["step_time_ms"] > data["step_time_ms"] and rule["gain"] > 0.15
    usable = result.config.usable_bytes / 1e9
    assert data["peak_gb_max"] <= usable and rules["torchtitan"]["peak_gb_max"] <= usable
    assert len(rules["zero-bubble"]["peak_gb"]) == 4
    for rule in rules.values():  # equal memory in the strict sense: within the rule's own peak
        same = rule["plan_at_rule_peak"]
        assert same["peak_gb_max"] <= rule["peak_gb_max"] + 1e-9
        assert same["step_time_ms"] < rule["step_time_ms"]


def test_the_claim_is_proven_and_the_schedule_passes_the_simulator(result):
    case, res = result.best
    assert res.status == "optimal"
    assert result.lower_bound == pytest.approx(res.step_ms, rel=1e-6)
    sim = validate(case.problem.instance(res.split), Schedule.from_dict(res.schedule))
    assert sim.makespan == pytest.approx(res.step_ms)
    data = plan_dict(result)
    assert data["claim"].startswith("optimal")
    assert data["tokens_per_s"] == pytest.approx(16 * 256 / (res.step_ms / 1e3))
    solver_row = data["table"][-1]
    assert solver_row["schedule"] == "zbsolve (optimal)"
    assert solver_row["step_time_ms"] == res.step_ms
    assert {r["schedule"] for r in data["table"]} >= {"1f1b", "zb-h1", "zb-h2", "gpipe"}


def test_local_processes_give_the_same_plan(result):
    again = plan(replace(result.config, backend="local", jobs=2))
    assert again.best[1].split == result.best[1].split
    assert again.best[1].step_ms == pytest.approx(result.best[1].step_ms)


def test_a_measured_profile_can_stand_in_for_the_model(result, tmp_path, capsys):
    path = tmp_path / "layers.json"
    result.cases[0].problem.profile.dump(path)  # what a profiler writes, same format
    flags = FLAGS[FLAGS.index("--gpus"):]
    assert main(["plan", "--profile", str(path), *flags, "--json", "-o", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["split"] == list(result.best[1].split)
    assert data["step_time_ms"] == pytest.approx(result.best[1].step_ms)
    assert main(["plan", "--profile", str(path), *flags, "--microbatch-size", "2",
                 "-o", str(tmp_path)]) == 2
    assert "measured with microbatches of 1, not 2" in capsys.readouterr().err


def test_cli_json_has_the_keys_and_writes_the_files(tmp_path, capsys):
    code = main(["plan", *FLAGS, "--json", "-o", str(tmp_path)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("split", "schedule", "step_time_ms", "peak_gb", "tokens_per_s", "rules",
                "table", "claim", "microbatches"):
        assert key in data, key
    assert len(data["peak_gb"]) == 4 and data["microbatches"] == 16
    assert (tmp_path / "timeline.png").stat().st_size > 0
    assert json.loads((tmp_path / "plan.json").read_text())["split"] == data["split"]
    Schedule.from_dict(json.loads((tmp_path / "schedule.json").read_text()))


def test_cli_json_carries_the_torchtitan_and_megatron_keys(tmp_path, capsys):
    assert main(["plan", *FLAGS, "--json", "-o", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data["torchtitan"], dict) and data["torchtitan"]
    assert isinstance(data["megatron"], dict) and data["megatron"]


def test_microbatch_count_is_a_choice_when_the_batch_leaves_one():
    cfg = PlanConfig(accelerator("h100"), 4, 16, model=family("llama", **SHAPE),
                     layouts=[ChunkLayout(1)], time_limit=60, backend="inline", candidates=1)
    res = plan(cfg)
    assert sorted(c.microbatch_size for c in res.cases) == [1, 2, 4]  # >= 4 microbatches
    case, best = res.best
    assert case.microbatch_size * case.problem.microbatches == 16
    assert best.step_ms == min(r.step_ms for r in res.results.values())


@pytest.mark.parametrize("extra, why", [
    (["--microbatch-size", "3"], "--microbatch-size: 3 does not divide the 16 sequences"),
    (["--hf", "bert"], "--hf: unknown model family 'bert'"),
    (["--gpu", "v100"], "--gpu: unknown accelerator 'v100'"),
    (["--pp", "3"], "--pp: 3 does not divide --gpus 4"),
    (["--placements", "zigzag"], "--chunks/--placements: expected chunks >= 1 and loop/v"),
])
def test_bad_input_is_one_line_and_exit_2(extra, why, capsys, tmp_path):
    assert main(["plan", *FLAGS, *extra, "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert why in err and len(err.splitlines()) == 1


def test_missing_size_flag_is_named(capsys, tmp_path):
    i = FLAGS.index("--vocab")
    assert main(["plan", *FLAGS[:i], *FLAGS[i + 2:], "-o", str(tmp_path)]) == 2
    assert "--vocab: required with --hf llama" in capsys.readouterr().err


@pytest.mark.parametrize("interrupted, search, solve, says", [
    (True, {"skipped": 9}, {}, "interrupted before any schedule"),
    (False, {"skipped": 9}, {"skipped": 18}, "ran out before any split was solved (27 "),
    (False, {"ok": 9}, {"ok": 0, "timeout": 2}, "ran out before any split was solved (2 "),
    (False, {"ok": 9}, {"ok": 4}, "no schedule fits: every split evaluated is infeasible"),
])
def test_no_plan_says_why(interrupted, search, solve, says):
    # a limit that ran out before anything was solved was once reported as "no schedule fits"
    from types import SimpleNamespace

    from zbsolve.plan.report import _no_plan

    result = SimpleNamespace(interrupted=interrupted, fanout={"search": search, "solve": solve},
                             config=SimpleNamespace(time_limit=3.0))
    assert says in _no_plan(result)
