"""The walkthrough notebook runs top to bottom in a fresh kernel, so it never rots.

The kernel is the venv's own ipykernel: jupyter_client swaps the spec's ``python`` for
``sys.executable``, so the notebook imports this checkout's zbsolve, not a system one.
"""

from __future__ import annotations

import time

from conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"


def test_walkthrough_notebook_executes(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("ZBSOLVE_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    # the flow produced every artefact it shows
    for name in ("timeline.png", "schedule.csv", "sweep/pareto.csv", "sweep/pareto.png",
                 "sweep/pareto.svg"):
        assert (tmp_path / name).stat().st_size > 0, name
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "same schedule" in text and "status optimal" in text
    assert "'infeasible': 1" in text  # 0.1 of the 1F1B peak is below the minimum
    assert elapsed < 90, f"notebook took {elapsed:.0f} s; keep its settings small"
