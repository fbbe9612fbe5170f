"""A schedule and a layer split as torchtitan loads them: the CSV, the config keys, the command.

torchtitan (checked against torchtitan 0.3.0's ``ParallelismConfig`` and
``distributed/pipeline_parallel.py``) reads, under ``parallelism``:

- ``pipeline_parallel_degree``: the number of pipeline ranks p;
- ``pipeline_parallel_schedule``: a torch schedule name. With a CSV it is still read, twice:
  ``_get_pp_rank_to_stage_indices_mapping`` places stages by it (V for ``ZBVZeroBubble`` and
  ``DualPipeV``, loop otherwise) and ``_get_pipeline_metadata`` checks it exists; the
  schedule object itself is ``_PipelineScheduleRuntime`` loading the CSV. So the name must be
  one whose placement matches ours (:func:`zbsolve.export.torch_names.runtime_name`);
- ``pipeline_parallel_schedule_csv``: the CSV path (compute-only; torch adds its own P2P);
- ``pipeline_parallel_microbatch_size``; the number of microbatches is
  ``training.local_batch_size / microbatch size``, so ``local_batch_size`` = m x that size;
- ``module_fqns_per_model_part``: per logical stage, the FQNs of its modules. For torchtitan's
  Llama 3 the model is ``tok_embeddings``, ``layers.0`` .. ``layers.{L-1}``, ``norm``,
  ``lm_head``; a layer profile of ``[embedding, L blocks, head]`` (what ``zbsolve profile --hf``
  measures) maps onto those by position.

torchtitan 0.3.0 is configured by Python ``config_registry`` functions with command-line
overrides (``--parallelism.pipeline_parallel_degree 4``), not TOML files; earlier releases
read ``--job.config_file`` TOML. :func:`write_torchtitan` writes both: ``overrides.txt`` (one
argument per line, for this version) and ``torchtitan.toml`` (the same keys as a TOML fragment),
plus ``schedule.csv`` and ``command.sh``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zbsolve.export.torch_names import runtime_name


class TorchtitanExportError(ValueError):
    """A schedule or split torchtitan cannot load as asked; the message names the fix."""


def llama3_fqns(n_layers: int) -> list[list[str]]:
    """torchtitan Llama 3 FQNs of a ``[embedding, n-2 blocks, head]`` layer list."""
    if n_layers < 3:
        raise TorchtitanExportError(f"split: {n_layers} layers; a Llama 3 layer list is "
                                    "[embedding, >= 1 block, head]")
    return [["tok_embeddings"], *([f"layers.{i}"] for i in range(n_layers - 2)),
            ["norm", "lm_head"]]


def fqns_per_stage(split: Sequence[int], layer_names: Sequence[str] | None = None) -> list[list[str]]:
    """``module_fqns_per_model_part``: per stage, the FQNs of its layers.

    ``layer_names``: one entry per layer; ``a+b`` names two modules of one layer. Default: the
    Llama 3 names by position.
    """
    n = sum(split)
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in split):
        raise TorchtitanExportError(f"split {list(split)}: every stage needs an integer >= 1 layers")
    if layer_names is None:
        per_layer = llama3_fqns(n)
    else:
        if len(layer_names) != n:
            raise TorchtitanExportError(f"layer_names: {len(layer_names)} names for a split of "
                                        f"{n} layers")
        per_layer = [name.split("+") for name in layer_names]
    out, start = [], 0
    for k in split:
        out.append([fqn for layer in per_layer[start:start + k] for fqn in layer])
        start += k
    return out


def torchtitan_config(inst, sched, split: list[int], *, layer_names: list[str] | None = None,
                      microbatch_size: int = 1, csv_path: str = "schedule.csv") -> dict[str, Any]:
    """The torchtitan config keys for this schedule and split, nested by section
    (``config["parallelism"]["pipeline_parallel_degree"]``; :func:`flat_keys` gives the dotted
    names). ``csv_path`` is the value written for ``pipeline_parallel_schedule_csv``."""
    from zbsolve.export.torch_csv import torch_refusal, torch_schedule_refusal

    why = torch_refusal(inst) or torch_schedule_refusal(sched)  # before the placement's name
    if why:
        raise TorchtitanExportError(f"torchtitan: {why}")
    if len(split) != inst.stages:
        raise TorchtitanExportError(f"split {split}: {len(split)} stages, the schedule has "
                                    f"{inst.stages} (devices x chunks); pass one count per stage")
    if isinstance(microbatch_size, bool) or not isinstance(microbatch_size, int) or microbatch_size < 1:
        raise TorchtitanExportError(f"microbatch_size: expected an integer >= 1, got "
                                    f"{microbatch_size!r}")
    split_bw = any(op.kind in ("I", "W") for op in sched.ops())  # inside pairs too
    try:
        name = runtime_name(inst.placement, inst.p, inst.v, split_backward=split_bw)
    except ValueError as exc:
        raise TorchtitanExportError(str(exc)) from None
    return {
        "parallelism": {
            "pipeline_parallel_degree": inst.p,
            "pipeline_parallel_schedule": name.name,
            "pipeline_parallel_schedule_csv": csv_path,
            "pipeline_parallel_microbatch_size": microbatch_size,
            "module_fqns_per_model_part": fqns_per_stage(split, layer_names),
        },
        "training": {"local_batch_size": inst.m * microbatch_size},
    }


def flat_keys(config: dict[str, Any]) -> dict[str, Any]:
    """``{"parallelism.pipeline_parallel_degree": 4, ...}``: the dotted names torchtitan uses."""
    return {f"{section}.{key}": value for section, keys in config.items()
            for key, value in keys.items()}


def cli_overrides(config: dict[str, Any]) -> list[str]:
    """``--section.key value`` arguments as torchtitan's tyro parser reads them.

    torchtitan registers ``list[str]`` as one comma-separated argument, so a
    ``list[list[str]]`` is one comma-separated argument per inner list
    (``--parallelism.module_fqns_per_model_part tok_embeddings,layers.0 layers.1,norm,lm_head``;
    checked by the tests with torchtitan's own ``ConfigManager`` rules).
    """
    args = []
    for section, keys in config.items():
        for key, value in keys.items():
            args.append(f"--{section}.{key}")
            if isinstance(value, list):
                args += [",".join(part) if isinstance(part, list) else str(part) for part in value]
            else:
                args.append(str(value))
    return args


def toml_fragment(config: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        return json.dumps(v)  # strings and lists of strings are valid TOML as JSON

    lines = []
    for section, keys in config.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {value(v)}" for k, v in keys.items()]
        lines.append("")
    return "\n".join(lines)


def run_command(config: dict[str, Any], *, module: str = "llama3",
                config_name: str = "llama3_8b") -> str:
    """The torchrun command line that trains with this schedule on p GPUs of one node."""
    p = config["parallelism"]["pipeline_parallel_degree"]
    args = " ".join(shlex.quote(a) for a in cli_overrides(config))
    return (f"torchrun --nproc-per-node {p} -m torchtitan.train --module {module} "
            f"--config {config_name} {args}")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_torchtitan(inst, sched, split: list[int], out_dir: str | Path, *,
                     layer_names: list[str] | None = None, microbatch_size: int = 1,
                     module: str = "llama3", config_name: str = "llama3_8b") -> dict[str, Any]:
    """Write ``schedule.csv``, ``torchtitan.toml``, ``overrides.txt``, ``command.sh`` (each
    atomically) into ``out_dir``; returns the config (with the CSV's absolute path)."""
    from zbsolve.export.torch_csv import compute_rows

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_file = (out / "schedule.csv").resolve()
    config = torchtitan_config(inst, sched, split, layer_names=layer_names,
                               microbatch_size=microbatch_size, csv_path=str(csv_file))
    rows = compute_rows(inst, sched)  # validated by the simulator
    _write(csv_file, "".join(",".join(row) + "\n" for row in rows))
    _write(out / "torchtitan.toml", toml_fragment(config))
    _write(out / "overrides.txt", "\n".join(cli_overrides(config)) + "\n")
    _write(out / "command.sh", "#!/bin/sh\n# generated by zbsolve export --format torchtitan\n"
           + run_command(config, module=module, config_name=config_name) + "\n")
    return config
