"""``cpsat.run``: every CP-SAT solve of the solver goes through it, past OR-Tools 9.15's presolve
crash on some solution hints (google/or-tools#5288)."""

from __future__ import annotations

import gzip
from pathlib import Path

import ortools
import pytest
from ortools.sat.python import cp_model

from zbsolve.solver.cpsat import EXACT_MODEL_PARAMS, new_solver, run

# the exact model of a 3-device, two-replica V with step jobs, and the hint that crashed it in a
# 2-s solve (found by results/audit/cli.py: `zbsolve solve` ended in a traceback); the hint is
# a feasible schedule of makespan 52, the optimum is 51
MODEL = Path(__file__).parent / "data" / "ortools-5288-model.pb.txt.gz"


def _model() -> cp_model.CpModel:
    model = cp_model.CpModel()
    model.proto.parse_text_format(gzip.decompress(MODEL.read_bytes()).decode())
    return model


def _solver() -> cp_model.CpSolver:
    return new_solver(10, workers=1, seed=0, extra=EXACT_MODEL_PARAMS)


def test_a_hint_that_crashes_presolve_is_dropped_and_the_model_solved():
    model = _model()
    assert len(model.proto.solution_hint.vars) == len(model.proto.variables)
    if ortools.__version__.startswith("9.15."):  # the crash this works around is still there
        with pytest.raises(IndexError, match="btree_map"):
            _solver().solve(_model())
    solver = _solver()
    assert run(solver, model) == cp_model.OPTIMAL
    assert solver.objective_value == 51
    assert not len(model.proto.solution_hint.vars)  # solved without it


def test_without_a_hint_the_error_is_not_hidden():
    class Failing:
        def solve(self, model, callback=None):
            raise IndexError("absl::btree_map::at")

    model = _model()
    model.clear_hints()
    with pytest.raises(IndexError):
        run(Failing(), model)
