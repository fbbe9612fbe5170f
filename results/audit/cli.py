"""Audit the command line on random instance files that combine features.

Usage: python results/audit/cli.py SEED COUNT [MAX_OPS] > OUT.jsonl

The instances are ``draws.py``'s (MAX_OPS default 120), each written as a JSON
instance file. For each, in one process (``zbsolve.cli.main``): ``baselines --json``,
``solve --time-limit 2 --workers 1 -o S.json --json``, then on its schedule ``check``,
``show`` (a PNG), and ``export`` in every format (``--split`` two layers a stage, three for
the first), each with ``--json``; every written table and CSV goes through ``check`` again;
last ``sweep`` over two limits (half and all of 1F1B's peak) and the layouts one and two
chunks, loop and V (1 s a case). A sweep may refuse (exit 2, its line is kept under
``refused`` to be read).
Checked: ``baselines``, ``solve``, ``check`` and ``show`` end with exit code 0 and print one
JSON document; ``export`` ends with 0, or with 2 and a refusal that names its format's reason
(torch's runtime, Megatron's loop, torchtitan); a traceback, another exit code, or output that
is not JSON is a finding. Since the command line turns any ``ValueError`` into a one-line
error, a refusal is only taken for one where its message says what it refuses.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from draws import run_draws  # noqa: E402

from zbsolve.cli import main as zbsolve  # noqa: E402
from zbsolve.export import FORMATS  # noqa: E402

EXPORTS = (*FORMATS, "torchtitan", "megatron")
REASONS = ("torch's pipelining runtime", "Megatron places virtual stages in a loop",
           "torch's schedules (and torchtitan) place stages", "sequence segments",
           "memory modes")


def run(argv: list[str]) -> tuple[int | str, str, str]:
    """``zbsolve ARGV`` in this process: exit code (an exception's name and message where it
    escaped: the finding), stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc: int | str = zbsolve(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 - the finding: a traceback for the user
            rc = f"{type(exc).__name__}: {exc}"
    return rc, out.getvalue(), err.getvalue()


def expect_json(what: str, argv: list[str], bad: list[str]) -> dict | None:
    rc, out, err = run(argv)
    if rc != 0:
        bad.append(f"{what}: exit {rc}: {(err or out).strip()[:300]}")
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        bad.append(f"{what}: not one JSON document: {out[:200]!r}")
        return None


def audit(inst, where: Path, bad: list[str], refused: Counter) -> None:
    f = where / "inst.json"
    f.write_text(json.dumps(inst.to_dict()))
    expect_json("baselines", ["baselines", str(f), "--json"], bad)
    s = where / "s.json"
    if expect_json("solve", ["solve", str(f), "--time-limit", "2", "--workers", "1",
                             "-o", str(s), "--json"], bad) is None:
        return
    expect_json("check", ["check", str(f), str(s), "--json"], bad)
    expect_json("show", ["show", str(f), str(s), "-o", str(where / "t.png"), "--json"], bad)
    split = ",".join(["3"] + ["2"] * (inst.stages - 1))
    for fmt in EXPORTS:
        out = where / (f"e-{fmt}.csv" if fmt.startswith("torch-csv") else f"e-{fmt}.json")
        if fmt == "torchtitan":
            out = where / "titan"
        argv = ["export", "--instance", str(f), str(s), "--format", fmt, "-o", str(out),
                "--split", split, "--json"]
        rc, text, err = run(argv)
        said = (err + text).strip()  # with --json the error is a JSON document on stdout
        if rc == 2 and any(r in said for r in REASONS):
            refused[f"{fmt}: {said[:100]}"] += 1
            continue
        if rc != 0:
            bad.append(f"export {fmt}: exit {rc}: {said[:300]}")
            continue
        if fmt in ("executor", "torch-csv", "torch-csv-comms", "torch-csv-ext"):
            expect_json(f"check {fmt}", ["check", str(f), str(out), "--json"], bad)
    rc, text, err = run(["sweep", str(f), "--limits", "0.5,1.0", "--chunks", "1,2",
                         "--placements", "loop,v", "--time-limit", "1", "--workers", "1",
                         "-o", str(where / "sweep"), "--no-progress", "--json"])
    said = (err + text).strip()
    if rc == 2:
        refused[f"sweep: {said[:160]}"] += 1
    elif rc != 0:
        bad.append(f"sweep: exit {rc}: {said[:300]}")


def options(extra: list[str]):
    """MAX_OPS (default 120)."""
    def one(inst, rng: random.Random) -> dict:
        bad: list[str] = []
        refused: Counter = Counter()
        with tempfile.TemporaryDirectory() as tmp:
            audit(inst, Path(tmp), bad, refused)
        return {"instance": inst.to_dict(), "bad": bad, "refused": dict(refused)}
    return one, int(extra[0]) if extra else 120


if __name__ == "__main__":
    raise SystemExit(run_draws(sys.argv[1:], __doc__.splitlines()[2], options))
