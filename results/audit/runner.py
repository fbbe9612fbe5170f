"""Audit the torch.distributed runner's gradient proof on random instances that combine features.

Usage: python results/audit/runner.py SEED COUNT [MAX_OPS] > OUT.jsonl

The instances are ``draws.py``'s (MAX_OPS default 60). For each: ``solve --time-limit 2
--workers 1``, ``export --format executor``, then ``zbsolve run TABLE --json`` (gpt-tiny on
CPU, gloo, one rank per device, two steps; each command a process of its own, the run given 300
s). Checked: the run ends with exit code 0 and ``"ok": true`` (every gradient and loss equal to
the single-process reference, none missing or non-finite), or refuses with exit code 2 and one
line (kept under ``refused`` to be read). A refusal of the step boundary on two replicas is
answered by running again with ``--step none``. Anything else (a traceback, a hang, another
exit code, a mismatch) is a finding.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from draws import run_draws  # noqa: E402

RUN_SECONDS = 300


def zbsolve(*args: str, timeout: float = 120) -> tuple[int | str, str, str]:
    """Exit code ("hang" past ``timeout``), stdout, and both streams for the record."""
    try:
        done = subprocess.run([sys.executable, "-m", "zbsolve", *args], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", "", ""
    return done.returncode, done.stdout, (done.stdout + done.stderr).strip()


def audit(inst, where: Path) -> dict:
    bad: list[str] = []
    refused: Counter = Counter()
    f, s, t = where / "inst.json", where / "s.json", where / "t.json"
    f.write_text(json.dumps(inst.to_dict()))
    for step in (["solve", str(f), "--time-limit", "2", "--workers", "1", "-o", str(s)],
                 ["export", "--instance", str(f), str(s), "--format", "executor", "-o",
                  str(t)]):
        rc, _, said = zbsolve(*step)
        if rc != 0:
            return {"bad": [f"{step[0]}: exit {rc}: {said[-300:]}"]}
    extra: list[str] = []
    while True:
        rc, stdout, said = zbsolve("run", str(t), "--json", *extra, timeout=RUN_SECONDS)
        if rc == 2 and "Traceback" not in said:
            refused[said[:200]] += 1
            if "--step none" in said and not extra:
                extra = ["--step", "none"]
                continue
            return {"bad": bad, "refused": dict(refused)}
        break
    try:
        out = json.loads(stdout) if rc == 0 else None
    except ValueError:  # --json prints one JSON document on stdout
        out = None
    if rc != 0 or out is None:
        bad.append(f"run: exit {rc}: {said[-400:]}")
    elif not out.get("ok") or out.get("nonfinite") or out.get("mismatched"):
        bad.append(f"run: not proven: max_rel_diff {out.get('max_rel_diff')}, worst "
                   f"{out.get('worst')}, nonfinite {(out.get('nonfinite') or [])[:3]}")
    summary = None if out is None else {k: out.get(k) for k in ("ranks", "stages", "replicas",
                                                                "max_rel_diff", "checked",
                                                                "overlap_f_b_ran", "ok")}
    return {"bad": bad, "refused": dict(refused), "run": summary, "step": extra or None,
            "counts": {"proven": int(bool(out and out.get("ok")))}}


def options(extra: list[str]):
    """MAX_OPS (default 60)."""
    def one(inst, rng: random.Random) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            return {"instance": inst.to_dict(), **audit(inst, Path(tmp))}
    return one, int(extra[0]) if extra else 60


if __name__ == "__main__":
    raise SystemExit(run_draws(sys.argv[1:], __doc__.splitlines()[2], options))
