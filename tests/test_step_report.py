"""The step-time report (zbsolve.step_report): every family under each step mode, hand-checked."""

from __future__ import annotations

import csv
import io

import pytest

from zbsolve.instance import load_instance
from zbsolve.step_report import CSV_FIELDS, LAYOUTS, csv_text, family_rows, layouts, markdown


@pytest.fixture(scope="module")
def rows():
    base = load_instance(dict(name="r", devices=4, microbatches=8, times=dict(F=2, I=2, W=2),
                              comm=0, step=dict(optimizer=2, check=1)))
    return [row for layout, inst in layouts(base).items() for row in family_rows(layout, inst)]


def test_1f1b_by_hand(rows):
    # 1F1B, p=4, m=8, F=2, B=4: the pipeline ends at (m+p-1)(F+B) = 66 on stage 0 (last W).
    # sync: + check 1 + optimizer 2 = 69; post-validation: stage 0 steps right away, 68.
    r = next(r for r in rows if r.name == "1f1b")
    assert (r.modes["none"].makespan, r.modes["sync"].makespan,
            r.modes["post-validation"].makespan) == (66, 69, 68)
    assert r.saved("makespan") == pytest.approx(1 / 69)


def test_every_layout_and_the_csv(rows):
    assert {r.layout for r in rows} == set(LAYOUTS)
    for r in rows:  # the step only adds time; sync's span is its makespan (everyone waits)
        assert r.modes["none"].makespan <= r.modes["post-validation"].makespan
        assert r.modes["sync"].span == r.modes["sync"].makespan
    table = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert tuple(table[0]) == CSV_FIELDS and len(table) == len(rows)
    assert markdown(rows).count("\n") == len(rows) + 2
