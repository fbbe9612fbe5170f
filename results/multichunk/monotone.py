"""Does a longer wall-clock limit ever give a worse answer, and does ``--start`` stop it? (issue 18)

For each bench case: ``zbsolve solve`` at SHORT seconds (its schedule kept), at LONG seconds, and
at LONG seconds started from the SHORT answer (``--start``). CP-SAT's parallel search under a
wall clock is not monotone in the limit; the third run is never worse than the first by
construction (the start is a hint the solve's pool keeps), and the table shows what that is
worth against the plain longer run.

    python results/multichunk/monotone.py OUT 20 60 random/random-01 vmin/p8-m16 ...
    python results/multichunk/monotone.py --deterministic OUT 20 60 random/random-01 ...

With ``--deterministic`` every solve gets ``--deterministic``: the limits are CP-SAT's
deterministic seconds, so the table is the same on any machine and under any load.

Writes OUT/monotone.md and OUT/monotone.csv (and the instances, schedules and JSON answers).
Every run is the CLI a user types, with 2 workers, seed 0, the case's objective.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from zbsolve.bench import build_cases, machine_note, select

ARMS = ("short", "long", "long-from-short")


def solve(inst_path: Path, objective: str, seconds: float, out: Path, start: Path | None,
          deterministic: bool) -> dict:
    cmd = [sys.executable, "-m", "zbsolve", "solve", str(inst_path), "--objective", objective,
           "--time-limit", str(seconds), "--workers", "2", "--seed", "0", "-o", str(out), "--json"]
    if start is not None:
        cmd += ["--start", str(start)]
    if deterministic:
        cmd.append("--deterministic")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:  # killed or crashed: no JSON answer at all
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}, no answer: "
                         f"{done.stderr.strip()[-300:]}") from None
    if "error" in answer:
        raise SystemExit(f"{' '.join(cmd)}: {answer['error']}")
    return answer


def main() -> None:
    args = sys.argv[1:]
    deterministic = "--deterministic" in args
    args = [a for a in args if a != "--deterministic"]
    if len(args) < 4:
        raise SystemExit("usage: monotone.py [--deterministic] OUT SHORT LONG CASE [CASE ...]")
    out, short, long_ = Path(args[0]), float(args[1]), float(args[2])
    cases = select(build_cases(time_limit=short), args[3:])
    if not cases:
        raise SystemExit(f"no bench case matches {' '.join(args[3:])}")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for case in cases:
        stem = case.id.replace("/", "-")
        inst_path = out / f"{stem}.yaml"
        case.inst.dump(inst_path)
        first = out / f"{stem}-short.json"
        answers = {
            "short": solve(inst_path, case.objective, short, first, None, deterministic),
            "long": solve(inst_path, case.objective, long_, out / f"{stem}-long.json", None,
                          deterministic),
            "long-from-short": solve(inst_path, case.objective, long_,
                                     out / f"{stem}-long-from-short.json", first, deterministic),
        }
        (out / f"{stem}.answers.json").write_text(json.dumps(answers, indent=1))
        row = {"case": case.id, "ops": case.ops, "objective": case.objective}
        for arm in ARMS:
            row[f"{arm}_seconds"] = answers[arm]["command_time"]
            a = answers[arm]
            row[f"{arm}_value"] = a["objective_value"]
            row[f"{arm}_bound"] = a["lower_bound"]
            row[f"{arm}_status"] = a["status"]
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    with open(out / "monotone.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    worse = [r for r in rows if r["long_value"] > r["short_value"] + 1e-9]
    chained_worse = [r for r in rows if r["long-from-short_value"] > r["short_value"] + 1e-9]
    unit = "deterministic s" if deterministic else "s"
    lines = [f"# {short:g} {unit} against {long_:g} {unit}, and {long_:g} {unit} started from "
             f"the {short:g}-{unit} answer",
             "", f"Started {started}; {machine_note()}; "
             f"command: `python results/multichunk/monotone.py "
             f"{'--deterministic ' if deterministic else ''}OUT {' '.join(args[1:])}`.", "",
             f"- Longer limit worse than shorter: **{len(worse)} / {len(rows)}**"
             + (f" ({', '.join(r['case'] for r in worse)})" if worse else ""),
             f"- Longer limit from the shorter answer (`--start`) worse than it: "
             f"**{len(chained_worse)} / {len(rows)}**", "",
             "| case | ops | " + " | ".join(f"{a} value / bound" for a in ARMS) + " |",
             "|---|---|" + "---|" * len(ARMS)]
    for r in rows:
        cells = [f"{r[f'{a}_value']:.6g} / {r[f'{a}_bound']:.6g}"
                 + (" (optimal)" if r[f"{a}_status"] == "optimal" else "") for a in ARMS]
        lines.append(f"| {r['case']} | {r['ops']} | " + " | ".join(cells) + " |")
    (out / "monotone.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
