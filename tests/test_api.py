"""The public API is lazy, the README's example runs, and the project needs nothing outside it:
the shipped data, an installed wheel's ``zbsolve bench``, and torch's runtime loading our CSV."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from zbsolve.data import REFERENCE_FILES, instance_path, reference_path

HEAVY = ("torch", "ortools", "zbsolve.solver", "zbsolve.runtime", "zbsolve.profiler")


def _run_python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**os.environ, **env})


def test_import_zbsolve_loads_no_solver_and_no_torch():
    code = f"""
import json, sys
import zbsolve
loaded = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ortools')
                        or any(m == h or m.startswith(h + '.') for h in {HEAVY!r}))
out = {{"import": loaded()}}
inst = zbsolve.load_instance('instances/seed/teaching-p4-m8.yaml')
sim = zbsolve.simulate.simulate(inst, zbsolve.baselines.generate('zb-h1', inst))
zbsolve.export.FORMATS, zbsolve.load_schedule, zbsolve.Schedule
out["used"] = loaded()
out["makespan"] = sim.makespan
zbsolve.solve
out["solve"] = loaded()
print(json.dumps(out))
"""
    proc = _run_python(code, ROOT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["import"] == [] and out["used"] == [] and out["makespan"] == 27
    assert "ortools" in out["solve"] and "zbsolve.solver" in out["solve"]
    assert not any(m.split(".")[0] == "torch" for m in out["solve"])


def test_public_names_and_a_clear_error_for_others():
    import zbsolve

    assert {"load_instance", "solve", "baselines", "simulate", "export"} <= set(zbsolve.__all__)
    assert {"load_instance", "solve"} <= set(dir(zbsolve))
    with pytest.raises(AttributeError, match="module 'zbsolve' has no attribute 'nope'"):
        zbsolve.nope  # noqa: B018


def test_readme_python_example_runs_as_printed(tmp_path):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## Python API.*?```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "instances").symlink_to(ROOT / "instances")  # the README runs from the root
    proc = _run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "1f1b 33.0 [4.0, 3.0, 2.0, 1.0]"
    assert lines[1] == "zb-h1 27.0 [4.0, 3.0, 2.0, 1.0]"
    assert lines[2] == "optimal 35.0 [2.0, 2.0, 2.0, 1.0]"
    assert lines[3].startswith("wrote teaching.csv (torch-csv)")
    assert (tmp_path / "teaching.csv").read_text().startswith("0F0,")


# ------------------------------------------------------------------ self-contained
def test_shipped_reference_tables_and_instances():
    for name in REFERENCE_FILES:
        assert reference_path(name).stat().st_size > 0, name
    readme = (reference_path(REFERENCE_FILES[0]).parent / "README.md").read_text()
    for source in ("Zero Bubble Pipeline Parallelism", "Pipeline Parallelism with Controllable "
                   "Memory", "test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv"):
        assert source in readme
    assert instance_path("seed/teaching-p4-m8.yaml").read_text() == (
        ROOT / "instances" / "seed" / "teaching-p4-m8.yaml").read_text()
    with pytest.raises(FileNotFoundError, match="no reference table 'x.csv'; shipped:"):
        reference_path("x.csv")


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines()]


def test_no_tracked_file_names_a_path_outside_the_repository():
    # absolute paths of the machines this was built on, and the old way of reaching outside
    # (``ROOT.parent / "shared" / "reference"``, ``../shared``)
    pattern = re.compile(r"(/work/|/home/|/Users/|\.\./shared|\"shared\")")
    bad = []
    for path in _tracked_files():
        if path.is_symlink():
            assert path.resolve().is_relative_to(ROOT.resolve()), path  # a link stays inside
            continue
        if not path.is_file() or path.suffix in (".png", ".svg", ".ipynb"):
            continue  # pictures; the notebook is checked below
        text = path.read_text(errors="ignore")
        bad += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in pattern.finditer(text)]
    notebook = (ROOT / "notebooks" / "walkthrough.ipynb").read_text()
    bad += [f"notebook: {m.group(0)}" for m in pattern.finditer(notebook)]
    bad += [f"notebook: {m.group(0)}" for m in re.finditer(r"/tmp/\S+", notebook)]
    bad = [b for b in bad if not b.startswith("tests/test_api.py")]  # the pattern itself
    assert not bad, bad


@pytest.mark.slow
def test_an_installed_wheel_runs_bench_from_anywhere(tmp_path):
    """pip-install the package (not editable) into a folder; from an empty folder, that copy
    finds its reference tables and instances: ``zbsolve bench --list`` and one small case."""
    import shutil

    source, target, empty = tmp_path / "source", tmp_path / "site", tmp_path / "empty"
    empty.mkdir()
    # build from a copy: pip builds a local folder in place (build/), which must not be the
    # checkout (a stale build/ there could hide a file that is no longer packaged)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("zbsolve", "instances"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=skip)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    env = {"PYTHONPATH": str(target)}
    where = _run_python("import zbsolve; print(zbsolve.__file__)", empty, **env)
    assert where.stdout.strip().startswith(str(target)), where.stdout  # not the checkout
    listed = _run_python("import sys; from zbsolve.cli import main; "
                         "sys.exit(main(['bench', '--list']))", empty, **env)
    assert listed.returncode == 0, listed.stderr
    # the installed copy lists exactly what the checkout lists (no case lost to packaging)
    here = _run_python("import sys; from zbsolve.cli import main; "
                       "sys.exit(main(['bench', '--list']))", ROOT)
    assert listed.stdout == here.stdout and "iclr-1p/1.5b-p8-m24" in listed.stdout
    ran = _run_python("import sys; from zbsolve.cli import main; sys.exit(main(['bench', "
                      "'--cases', 'vmin/p4-m8', '--quick', '--workers', '1', '--json']))",
                      empty, **env)
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    assert answer["meet_goal"] == 1 and Path(answer["files"][0]).parent.parent == empty


@pytest.mark.torch
def test_torch_runtime_runs_our_csv_in_the_example():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_pipelining_csv.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(torch-csv): zbsolve-makespan" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("PASS: gradients from torch's runtime")
