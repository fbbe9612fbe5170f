"""Bugs found in files being refactored by the lead (solver/**, existing functions of
export/executor.py): pinned here as strict xfails so the fix is noticed. The command line is
protected already (flags checked when parsed; files read through zbsolve.export.judge)."""

from __future__ import annotations

import pytest


@pytest.mark.xfail(strict=True, reason="solver/api.py SolveOptions.check accepts a seed above "
                   "CP-SAT's 32-bit range; the library call then fails inside CP-SAT "
                   "(the CLI refuses --seed 2147483648 itself)")
def test_solve_options_refuse_a_seed_cp_sat_cannot_take():
    from zbsolve.solver import SolveOptions

    with pytest.raises(ValueError, match="seed"):
        SolveOptions(seed=2**31).check()


def test_load_table_gives_one_line_errors(tmp_path):
    from zbsolve.export.executor import ExecutorError, load_table

    with pytest.raises(ExecutorError, match="folder"):
        load_table(tmp_path)
    dup = tmp_path / "t.json"
    dup.write_text('{"format": "zbsolve-executor", "format": "x"}')
    with pytest.raises(ExecutorError, match="duplicate key 'format'"):
        load_table(dup)
