"""The step boundary in the runner (issue 15): SGD and AdamW with gradient clipping by global
norm, synchronous and post-validated (speculative steps rolled back and redone), on 2 and 4
gloo ranks. After 3 steps the parameters equal the single-process synchronous reference at
rtol 1e-5 (fp32), with clipping active, with clipping inactive, and with an injected Inf that
makes one step skip. Each world size runs all its jobs in one launch (start-up dominates).

GPT for SGD; for AdamW a model without attention (``step_mlp_example``: AdamW turns the rounding
noise of an attention key bias's zero gradient into learning-rate-sized updates, see there).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.executor import lower  # noqa: E402
from zbsolve.instance import load_instance  # noqa: E402
from zbsolve.runtime.launch import run_jobs  # noqa: E402
from zbsolve.runtime.model import GPTConfig  # noqa: E402
from zbsolve.runtime.optim import OptimizerSpec  # noqa: E402
from zbsolve.runtime.runner import Job, RunOptions, TableMismatch, step_mode_of  # noqa: E402

pytestmark = pytest.mark.torch
STEPS = 3
CASES = {  # name -> (options, or options per model; expected decision per step)
    # every step clipped; every stage's own part is over the threshold: no stage speculates
    "clip-active": ({"clip": 1e-3}, ["clipped"] * 3),
    # the first step clipped although every stage's own part is under the threshold (the
    # global norms are 3.27 and 0.283, the largest parts 2.99 and 0.273): every stage steps
    # speculatively, is rolled back and redone; the next steps' norms are under it
    "clip-rollback": ({"sgd": {"clip": 3.0}, "adamw": {"clip": 0.275}},
                      ["clipped", "plain", "plain"]),
    "clip-inactive": ({"clip": 1e6}, ["plain"] * 3),
    "inf": ({"clip": 1e6, "inject_inf": (1, 1)}, ["plain", "skipped", "plain"]),
}
MODELS = {
    "sgd": ({"optimizer": "sgd"}, lambda stages: GPTConfig.preset(
        "gpt-tiny", layers=stages, hidden=32, heads=4, seq=16, vocab=64).to_dict()),
    "adamw": ({"optimizer": "adamw", "lr": 1e-2},
              lambda stages: {"kind": "module", "target": "step_mlp_example:build", "seed": 0}),
}
MODES = ("sync", "post-validation")


def table_for(p: int):
    """2 ranks: ZB-V (two stages per rank: the partial state's chain passes within ranks);
    4 ranks: ZB-H1 (one stage per rank)."""
    chunks, placement, family = (2, "v", "zb-v") if p == 2 else (1, "loop", "zb-h1")
    inst = load_instance(dict(name=f"step-p{p}", devices=p, microbatches=4, chunks=chunks,
                              placement=placement, times=dict(F=1, I=1, W=1), comm=0.1,
                              step=dict(mode="sync", optimizer=0.5, check=0.2)))
    return lower(inst, generate(family, inst))


@pytest.fixture(scope="module", params=[2, 4], ids=["2-ranks", "4-ranks"])
def launch(request, tmp_path_factory):
    p = request.param
    table = table_for(p)
    trace = tmp_path_factory.mktemp("trace") / f"p{p}.json"
    jobs = []
    for model, (model_opts, model_of) in MODELS.items():
        for case, (case_opts, _) in CASES.items():
            case_opts = case_opts.get(model, case_opts)
            for mode in MODES:
                label = f"{model}/{case}/{mode}"
                jobs.append(Job(table.to_dict(), model_of(table.stages), label=label,
                                options={**model_opts, **case_opts, "step_mode": mode},
                                trace=str(trace) if label == "sgd/clip-active/post-validation"
                                else None))
    reports = run_jobs(jobs, p, RunOptions(steps=STEPS, timeout_s=120))
    return p, table, {r["label"]: r for r in reports}, trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("model", list(MODELS))
def test_parameters_equal_the_synchronous_reference(launch, model, case, mode):
    p, table, reports, _ = launch
    r = reports[f"{model}/{case}/{mode}"]
    sb = r["step_boundary"]
    expected = CASES[case][1]
    assert sb["mode"] == mode and sb["optimizer"] == model
    assert sb["reference_decisions"] == expected and sb["decisions"] == expected
    assert r["ok"], (r["worst"], r["max_rel_diff"])
    assert r["max_rel_diff"] <= 1e-5 and not r["missing"]  # every parameter compared
    if mode == "sync":
        assert sb["redone"] == sb["rolled_back"] == [[]] * STEPS
        return
    # a speculative step stands only where the verdict says plain; the others are redone, and
    # rolled back where they had stepped: not where the stage's own part already said no
    every = list(range(table.stages))
    assert sb["redone"] == [every if d != "plain" else [] for d in expected]
    speculated = {"clip-active": [], "clip-rollback": every, "clip-inactive": every,
                  "inf": [s for s in every if s != 1]}[case]  # stage 1 holds the Inf
    assert sb["rolled_back"] == [speculated if d != "plain" else [] for d in expected]


def test_the_measured_timeline_shows_each_ranks_optimizer_step(launch):
    p, table, reports, trace = launch
    r = reports["sgd/clip-active/post-validation"]
    boundary = r["timing"]["step_boundary"]
    assert sorted(int(k) for k in boundary["per_rank"]) == list(range(p))
    for rank in boundary["per_rank"].values():
        assert rank["opt_ms"] > 0 and rank["redo_ms"] > 0  # every step clipped: all redone
        assert rank["end_ms"] >= rank["pipeline_end_ms"]
    assert boundary["predicted_boundary"] == pytest.approx(
        table.predicted["step"]["boundary"])
    events = json.loads(trace.read_text())["traceEvents"]
    measured_opt = {e["tid"] for e in events if e.get("cat") == "OPT" and e["pid"] == 0}
    predicted_opt = {e["tid"] for e in events if e.get("cat") == "OPT" and e["pid"] == 1}
    assert measured_opt == predicted_opt == set(range(p))
    assert {e.get("cat") for e in events if e.get("pid") == 0} >= {"OPT", "NORM", "VERDICT", "REDO"}


def test_global_decisions_need_a_step_mode():
    table = table_for(2)
    with pytest.raises(TableMismatch, match="need the step's global state"):
        step_mode_of(table, RunOptions(step_mode="none", clip=1.0))
    assert step_mode_of(table, RunOptions()) == "sync"  # the table's instance says so
    twice = dataclasses.replace(table, instance={**table.instance, "replicas": 2})
    with pytest.raises(TableMismatch, match="covers one model replica"):
        step_mode_of(twice, RunOptions(step_mode="post-validation"))
    with pytest.raises(ValueError, match="optimizer: expected one of sgd, adamw"):
        OptimizerSpec("lamb").check()
