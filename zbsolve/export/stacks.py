"""Hand a schedule and its layer split to a training stack: torchtitan (loads it) or Megatron
(takes the layout only). The CLI's ``--format torchtitan|megatron`` calls these.

The layer split comes from ``--split`` or from the instance's ``meta.split`` (written by
``LayerProfile.to_instance`` and ``zbsolve profile --hf/--module``). Before anything is
written the schedule is judged by the simulator, and the torch built-ins that run exactly one
of our families' orders are simulated on the same instance: when one reaches the schedule's
makespan, the report names the class (no CSV needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STACK_FORMATS = ("torchtitan", "megatron")


class StackExportError(ValueError):
    """The schedule, instance or split cannot be handed over as asked."""


def parse_split(text: str | None, inst) -> list[int]:
    """``--split 3,2,2,3`` or the instance's ``meta.split``."""
    if text:
        try:
            split = [int(x) for x in text.split(",")]
        except ValueError:
            raise StackExportError(f"--split {text!r}: expected layer counts such as 3,2,2,3") from None
    else:
        split = list((inst.extra.get("meta") or {}).get("split") or [])
        if not split:
            raise StackExportError(
                "--split: the instance carries no layer split (meta.split); pass --split with "
                "one layer count per logical stage, e.g. --split 3,2,2,3 ([embedding + blocks] "
                "... [blocks + head])")
    if len(split) != inst.stages or any(k < 1 for k in split):
        raise StackExportError(f"--split {split}: expected {inst.stages} counts >= 1 (one per "
                               "logical stage, devices x chunks)")
    return split


def builtin_line(inst, sched) -> tuple[str, dict[str, Any] | None]:
    from zbsolve.export.torch_names import builtin_reaching
    from zbsolve.simulate import simulate

    makespan = simulate(inst, sched).makespan
    match = builtin_reaching(inst, makespan)
    if match is None:
        return "no torch built-in schedule of this layout reaches this makespan: use the CSV", None
    return (f"torch's {match.torch_class} already reaches this ({match.makespan:.6g} vs "
            f"{makespan:.6g}; it runs the same order as our {match.family}): no CSV needed",
            {"family": match.family, "torch_class": match.torch_class,
             "makespan": match.makespan})


def export_torchtitan(inst, sched, out_dir: str | Path, *, split_text: str | None = None,
                      microbatch_size: int = 1) -> dict[str, Any]:
    from zbsolve.export.torchtitan import run_command, write_torchtitan

    split = parse_split(split_text, inst)
    names = (inst.extra.get("meta") or {}).get("torchtitan_layer_names")
    config = write_torchtitan(inst, sched, split, out_dir, layer_names=names,
                              microbatch_size=microbatch_size)
    line, match = builtin_line(inst, sched)
    return {"format": "torchtitan", "dir": str(out_dir), "config": config,
            "command": run_command(config), "builtin": match, "builtin_note": line,
            "files": [str(Path(out_dir) / f) for f in ("schedule.csv", "torchtitan.toml",
                                                       "overrides.txt", "command.sh")]}


def export_megatron(inst, sched, output: str | Path | None, *,
                    split_text: str | None = None) -> dict[str, Any]:
    import json
    import os

    from zbsolve.export.megatron import command_line, megatron_flags
    from zbsolve.export.torch_names import placement_kind
    from zbsolve.simulate import validate

    validate(inst, sched)
    split = parse_split(split_text, inst)
    if placement_kind(inst.placement, inst.p, inst.v) != "loop":
        raise StackExportError("megatron: Megatron places virtual stages in a loop (stage s on "
                               "rank s mod p); this instance's placement is not: solve with "
                               "placement loop")
    result = megatron_flags(split, chunks=inst.v)
    result["command_line"] = command_line(result)
    line, match = builtin_line(inst, sched)
    result["builtin"], result["builtin_note"] = match, line
    if output:
        path = Path(output)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, path)
    return result
