"""Audit the hand-made families and the exports on random instances that combine features.

Usage: python results/audit/exports.py SEED COUNT [MAX_OPS] > OUT.jsonl

The instances are ``draws.py``'s (same generator, MAX_OPS default 120, so up to 4
devices and 8 microbatches). For each: every hand-made family, the greedy list scheduler
(``heuristic_schedule``) and ``solve()`` for 2 s (one worker, seed 0); then for every schedule
the simulator accepts (feasible, under the limit), every export: the four torch CSV forms,
the executor table (also with I and W fused), the Chrome trace, the timeline picture, and
Megatron's flags and torchtitan's files with a split of two layers per stage (three for the
first). Checked:

- ``family``: a family either builds a schedule or refuses with ``NotApplicable`` (the
  greedy with ``GreedyDeadlock``), and ``solve()`` returns a schedule;
- ``export``: an export either writes, or refuses with the error class its docs name
  (``TorchCSVError``, ``StackExportError``, ``TorchtitanExportError``) and a message;
  anything else (an ``IndexError``, a bare ``ValueError``, a P2P error on a schedule the
  simulator accepts, ...) is a finding;
- ``read_back``: the executor table and the compute-only torch CSVs read back into a schedule
  with the simulator's makespan of the one written; the table passes the P2P check;
- ``judge``: ``zbsolve check``'s judge reads every written table and CSV and finds nothing
  wrong with it.

Lines carry the findings (``"bad"``) and the refusals seen (one per format and message); the
last line counts them.
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from draws import run_draws  # noqa: E402

from zbsolve.baselines import NAMES, generate  # noqa: E402
from zbsolve.baselines.common import NotApplicable  # noqa: E402
from zbsolve.export import FORMATS, write  # noqa: E402
from zbsolve.export.executor import load_table, schedule_from_table  # noqa: E402
from zbsolve.export.judge import judge, read_schedule_file  # noqa: E402
from zbsolve.export.p2p_check import require_safe  # noqa: E402
from zbsolve.export.stacks import StackExportError, export_megatron, export_torchtitan  # noqa: E402
from zbsolve.export.torch_csv import TorchCSVError, read_torch_csv  # noqa: E402
from zbsolve.export.torchtitan import TorchtitanExportError  # noqa: E402
from zbsolve.plot import save_timeline  # noqa: E402
from zbsolve.simulate import simulate  # noqa: E402
from zbsolve.solver.api import SolveOptions, solve  # noqa: E402
from zbsolve.solver.heuristic import GreedyDeadlock, heuristic_schedule  # noqa: E402

REFUSALS = (TorchCSVError, StackExportError, TorchtitanExportError)
TOL = 1e-6


def schedules(inst, bad: list[str]) -> list:
    out = []
    for name in NAMES:
        try:
            out.append(generate(name, inst))
        except NotApplicable:
            continue
        except Exception as exc:  # noqa: BLE001 - the finding
            bad.append(f"family {name}: {type(exc).__name__}: {exc}")
    try:
        out.append(heuristic_schedule(inst, "makespan")[0])
    except GreedyDeadlock:
        pass
    except Exception as exc:  # noqa: BLE001
        bad.append(f"family greedy: {type(exc).__name__}: {exc}")
    try:
        out.append(solve(inst, SolveOptions(time_limit=2, workers=1, seed=0)).schedule)
    except Exception as exc:  # noqa: BLE001
        bad.append(f"solve: {type(exc).__name__}: {exc}")
    return out


def exports(inst, sched, where: Path, bad: list[str], refused: Counter) -> None:
    makespan = simulate(inst, sched).makespan
    split = ",".join(["3"] + ["2"] * (inst.stages - 1))
    jobs = [(fmt, False) for fmt in FORMATS] + [("executor", True), ("megatron", False),
                                                ("torchtitan", False), ("timeline", False)]
    for fmt, fused in jobs:
        suffix = "csv" if fmt.startswith("torch-csv") else "json"
        path = where / f"{sched.name}.{fmt}{'.fused' if fused else ''}.{suffix}"
        what = f"{sched.name} {fmt}{' fused' if fused else ''}"
        try:
            if fmt == "megatron":
                export_megatron(inst, sched, path, split_text=split)
            elif fmt == "torchtitan":
                export_torchtitan(inst, sched, path, split_text=split)
            elif fmt == "timeline":
                save_timeline(inst, sched, path.with_suffix(".png"))
            else:
                write(inst, sched, fmt, path, fuse_bw=fused)
        except REFUSALS as exc:
            refused[f"{fmt}: {type(exc).__name__}: {str(exc)[:90]}"] += 1
            continue
        except Exception as exc:  # noqa: BLE001
            bad.append(f"export {what}: {type(exc).__name__}: {exc}")
            continue
        if fmt in ("executor", "torch-csv", "torch-csv-comms", "torch-csv-ext"):
            try:
                verdict = judge(inst, read_schedule_file(path, inst))
                if not verdict.ok:
                    bad.append(f"judge {what}: {verdict.summary_line()}")
            except Exception as exc:  # noqa: BLE001
                bad.append(f"judge {what}: {type(exc).__name__}: {exc}")
        try:
            if fmt == "executor":
                table = load_table(path)
                require_safe(table)
                back = schedule_from_table(table)
            elif fmt in ("torch-csv", "torch-csv-ext"):
                back = read_torch_csv(path)
            else:
                continue
            again = simulate(inst, back).makespan
            if not fused and abs(again - makespan) > TOL:
                bad.append(f"read_back {what}: makespan {again} against {makespan}")
        except Exception as exc:  # noqa: BLE001
            bad.append(f"read_back {what}: {type(exc).__name__}: {exc}")


def options(extra: list[str]):
    """MAX_OPS (default 120)."""
    def one(inst, rng: random.Random) -> dict:
        bad: list[str] = []
        refused: Counter = Counter()
        built = schedules(inst, bad)
        fits = [s for s in built if simulate(inst, s).feasible]
        with tempfile.TemporaryDirectory() as tmp:
            for sched in fits:
                exports(inst, sched, Path(tmp), bad, refused)
        return {"instance": inst.to_dict(), "bad": bad, "refused": dict(refused),
                "counts": {"schedules": len(built), "exported": len(fits)}}
    return one, int(extra[0]) if extra else 120


if __name__ == "__main__":
    raise SystemExit(run_draws(sys.argv[1:], __doc__.splitlines()[2], options))
