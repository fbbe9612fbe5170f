"""Step time under each step mode for every schedule family: what post-validation saves.

One model seen through every layout the families need (one chunk per device; two chunks in a
loop; two chunks in a V; two replicas), each hand-made family judged by the simulator with the
step boundary in mode none, sync and post-validation (``zbsolve.step``), and the solver asked
for the best step in sync and in post-validation. Two views of a step's time:

- ``makespan``: the step's end, the first microbatch's start to the last job of the step (the
  last optimizer step, or post-validation's check arriving at the last stage);
- ``span``: the longest device span, first job to its last optimizer step. With steps repeated,
  a device can start its next step when its own optimizer step is done, so this is the period
  of the repetition (the ZB papers' measure). Sync makes every device wait for the slowest, so
  its span is its makespan; post-validation keeps the parallelogram.

``saved`` = (sync - post-validation) / sync of each view. The command that writes the shipped
table is in ``results/step/README.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zbsolve.instance import Instance, load_instance
from zbsolve.step import MODES, with_mode

LAYOUTS = ("1 chunk", "2 chunks loop", "2 chunks V", "2 replicas")


def layouts(base: Instance) -> dict[str, Instance]:
    """The base instance (one chunk per device, loop) in every layout a family needs: two
    chunks per device have half a stage's times, memory and optimizer step each; two replicas
    repeat the stages (every copy steps its own parameters)."""
    data = base.to_dict()
    out = {LAYOUTS[0]: base}
    for name, placement in ((LAYOUTS[1], "loop"), (LAYOUTS[2], "v")):
        out[name] = load_instance(_halved(data, placement))
    out[LAYOUTS[3]] = load_instance({**data, "replicas": 2, "sync": 0.0})
    return out


def _halved(data: dict[str, Any], placement: str) -> dict[str, Any]:
    def half(value: Any) -> Any:
        if isinstance(value, list):  # per stage: each stage becomes two chunks
            return [x / 2 for x in value for _ in range(2)]
        return value / 2

    memory = dict(data.get("memory") or {})
    for key in ("activation", "weight", "params"):
        if key in memory:
            memory[key] = half(memory[key])
    step = dict(data.get("step") or {})
    for key in ("optimizer", "allreduce"):
        if key in step:
            step[key] = half(step[key])
    out = {**data, "name": f"{data['name']}-v2-{placement}", "chunks": 2,
           "placement": placement, "times": {k: half(v) for k, v in data["times"].items()},
           "memory": memory}
    if step:
        out["step"] = step
    return out


@dataclass
class ModeFigures:
    makespan: float
    span: float
    feasible: bool


@dataclass
class StepRow:
    """One schedule (a family, or the solver for one objective) under every mode."""

    layout: str
    name: str
    modes: dict[str, ModeFigures]
    note: str = ""

    def saved(self, view: str) -> float:
        sync = getattr(self.modes["sync"], view)
        return (sync - getattr(self.modes["post-validation"], view)) / sync

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "name": self.name, "note": self.note,
                **{mode: vars(f) for mode, f in self.modes.items()},
                "saved_makespan": self.saved("makespan"), "saved_span": self.saved("span")}


def family_rows(layout: str, inst: Instance) -> list[StepRow]:
    """Every applicable hand-made family, its orders judged in each mode."""
    from zbsolve.baselines import NAMES, NotApplicable, generate
    from zbsolve.simulate import simulate

    rows = []
    for name in NAMES:
        try:
            sched = generate(name, with_mode(inst, "none"))
        except NotApplicable:
            continue
        figures = {}
        for mode in MODES:
            r = simulate(with_mode(inst, mode), sched)
            figures[mode] = ModeFigures(r.makespan, r.max_span, r.feasible)
        rows.append(StepRow(layout, name, figures))
    return rows


def solver_rows(layout: str, inst: Instance, time_limit: float, workers: int = 2,
                seed: int = 0) -> list[StepRow]:
    """``zbsolve solve --step MODE --objective OBJ`` for both active modes and objectives; the
    none column is the same orders judged without the step."""
    from zbsolve.simulate import simulate
    from zbsolve.solver import SolveOptions, solve

    rows = []
    for objective in ("makespan", "span"):
        figures, notes = {}, []
        for mode in ("sync", "post-validation"):
            res = solve(with_mode(inst, mode), SolveOptions(
                time_limit=time_limit, workers=workers, seed=seed, objective=objective))
            figures[mode] = ModeFigures(res.sim.makespan, res.sim.max_span, res.sim.feasible)
            notes.append(f"{mode} {res.status} gap {100 * res.gap:.2f}%")
            if mode == "post-validation":
                plain = simulate(with_mode(inst, "none"), res.schedule)
                figures["none"] = ModeFigures(plain.makespan, plain.max_span, plain.feasible)
        rows.append(StepRow(layout, f"zbsolve ({objective})",
                            {m: figures[m] for m in MODES}, "; ".join(notes)))
    return rows


CSV_FIELDS = ("layout", "schedule", *(f"{mode}_{view}" for view in ("makespan", "span")
                                      for mode in MODES), "saved_makespan", "saved_span",
              "feasible", "note")


def csv_text(rows: list[StepRow]) -> str:
    """The table as CSV (full precision; shares saved as fractions)."""
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in rows:
        w.writerow([r.layout, r.name,
                    *(repr(getattr(r.modes[mode], view)) for view in ("makespan", "span")
                      for mode in MODES),
                    repr(r.saved("makespan")), repr(r.saved("span")),
                    all(f.feasible for f in r.modes.values()), r.note])
    return out.getvalue()


def markdown(rows: list[StepRow]) -> str:
    """The table: per schedule, makespan and span in each mode, and the shares saved."""
    head = ("| layout | schedule | none makespan | sync makespan | post-val. makespan | saved | "
            "none span | sync span | post-val. span | saved | notes |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        m = r.modes
        fits = "" if all(f.feasible for f in m.values()) else "over the memory limit; "
        lines.append(
            f"| {r.layout} | {r.name} | {m['none'].makespan:.2f} | {m['sync'].makespan:.2f} | "
            f"{m['post-validation'].makespan:.2f} | {100 * r.saved('makespan'):.2f}% | "
            f"{m['none'].span:.2f} | {m['sync'].span:.2f} | {m['post-validation'].span:.2f} | "
            f"{100 * r.saved('span'):.2f}% | {fits}{r.note} |")
    return "\n".join(lines) + "\n"
