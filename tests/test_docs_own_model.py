"""docs/own-model.md's worked example runs as written (in a temporary folder)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.torch
DOC = Path(__file__).resolve().parent.parent / "docs" / "own-model.md"


def test_worked_example_runs(tmp_path, capsys):
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(block, str(DOC), "exec"), {"__name__": "own_model_doc"})
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "ZBVZeroBubble" in out
    assert "[['tok_embeddings', 'layers.0'], ['layers.1', 'layers.2'], ['layers.3', 'layers.4'], " \
           "['layers.5', 'norm', 'lm_head']]" in out
    assert "torchrun --nproc-per-node 2 -m torchtitan.train --module llama3" in out
    assert "fused (no I/W split): none" in out
    for name in ("schedule.csv", "torchtitan.toml", "overrides.txt", "command.sh"):
        assert (tmp_path / "titan" / name).exists()
    rows = (tmp_path / "titan" / "schedule.csv").read_text().splitlines()
    # every rank runs each of its 2 stages' 8 microbatches once: F, then B or I and W
    assert len(rows) == 2
    for row in rows:
        kinds = [re.fullmatch(r"\d+([FIWB])\d+", c).group(1) for c in row.split(",")]
        assert kinds.count("F") == 16 and kinds.count("B") + kinds.count("I") == 16
        assert kinds.count("B") + kinds.count("W") == 16
