"""With and without the stretch phase, the same hour, through the CLI (issue 18, ninth pass).

For each bench case: ``zbsolve solve`` with ``--no-stretch``, then without it (the default), 2
workers, seed 0, the case's objective and limit SECONDS; one run after the other.

    python results/multichunk/stretch_ab.py OUT 60 vmin/p8-m32 vmin/p8-m64 ...

Writes OUT/stretch_ab.md (and the instances and JSON answers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from zbsolve.bench import build_cases, machine_note, select


def solve(inst_path: Path, objective: str, seconds: float, out: Path, flags: list[str]) -> dict:
    cmd = [sys.executable, "-m", "zbsolve", "solve", str(inst_path), "--objective", objective,
           "--time-limit", str(seconds), "--workers", "2", "--seed", "0", "-o", str(out),
           "--json", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: "
                         f"{done.stderr.strip()[-300:]}") from None


def main() -> None:
    if len(sys.argv) < 4:
        raise SystemExit("usage: stretch_ab.py OUT SECONDS CASE [CASE ...]")
    out, seconds = Path(sys.argv[1]), float(sys.argv[2])
    cases = select(build_cases(time_limit=seconds), sys.argv[3:])
    if not cases:
        raise SystemExit(f"no bench case matches {' '.join(sys.argv[3:])}")
    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# The stretch phase, {seconds:g} s, without (`--no-stretch`) and with", "",
             f"Started {started}; {machine_note()}; command: `python "
             f"results/multichunk/stretch_ab.py OUT {' '.join(sys.argv[2:])}`.", "",
             "| case | ops | without: value / bound (s) | with: value / bound (s) | stretch |",
             "|---|---|---|---|---|"]
    for case in cases:
        stem = case.id.replace("/", "-")
        inst_path = out / f"{stem}.yaml"
        case.inst.dump(inst_path)
        cells = []
        for arm, flags in (("without", ["--no-stretch"]), ("with", [])):
            a = solve(inst_path, case.objective, seconds, out / f"{stem}-{arm}.json", flags)
            (out / f"{stem}-{arm}.answer.json").write_text(json.dumps(
                {k: v for k, v in a.items() if k != "schedules"}, indent=1))
            proof = " optimal" if a["status"] == "optimal" else ""
            cells.append(f"{a['objective_value']:.6g} / {a['lower_bound']:.6g}{proof} "
                         f"({a['command_time']:.1f})")
        meta = json.loads((out / f"{stem}-with.json").read_text())["meta"]["solver"]
        note = "; ".join(f"m'={st['microbatches']}: {st['reduced_value']:g} "
                         f"({st['reduced_status']}), {st['valid']}/{st['tried']} valid, best "
                         f"{'-' if st['best'] is None else format(st['best'], '.6g')}, "
                         f"{st['seconds']:.1f} s, CP-SAT runs "
                         f"{'+'.join(st.get('reduced_runs', [])) or '-'}"
                         for st in meta.get("stretch", [])) or "-"
        lines.append(f"| {case.id} | {case.ops} | {cells[0]} | {cells[1]} | {note} |")
        print(lines[-1], flush=True)
    (out / "stretch_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
