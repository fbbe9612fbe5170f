"""``zbsolve profile --model gpt ... -o instance.yaml``: measure a torch model into an instance.

Your own model: ``--hf llama|mixtral|...|config.json`` (a Hugging Face causal LM built from a
config, random weights, no network) or ``--module pkg.mod:build`` (a function returning
``(layers, example_input, loss_fn)``) measures every layer (F, I, W, B, memory) and writes a
layer profile (``--layer-profile FILE``) and/or an instance for a layer split (``-o``, with
``--devices``, ``--microbatches`` and ``--split`` or the default even split).

Prints the measured vs analytic table; writes the instance (times in ms, memory in MiB) with the
spread and the analytic estimate under ``meta``. With ``--round DIGITS`` the file at ``-o`` holds
times rounded to DIGITS significant digits and the unrounded medians are written beside it as
``<name>.measured.yaml``: ``zbsolve solve`` takes either file.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from zbsolve.cli import args as types
from zbsolve.cli.common import add_json, print_json

MODEL_FLAGS = ("layers", "hidden", "heads", "seq", "vocab", "microbatch_size")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """Model flags shared with ``zbsolve loop`` (same names as ``zbsolve run``'s)."""
    parser.add_argument("--model", default="gpt",
                        help="gpt (sizes from the flags, defaults = gpt-tiny's) or a preset: "
                             "gpt-tiny, gpt-small, gpt-medium (flags override it)")
    parser.add_argument("--layers", type=types.positive_int,
                        help="transformer blocks L (default: the preset's)")
    parser.add_argument("--hidden", type=types.positive_int, help="hidden size h (default: the preset's)")
    parser.add_argument("--heads", type=types.positive_int, help="attention heads a (default: the preset's)")
    parser.add_argument("--seq", type=types.positive_int, help="sequence length s (default: the preset's)")
    parser.add_argument("--vocab", type=types.positive_int, help="vocabulary size V (default: the preset's)")
    parser.add_argument("--microbatch-size", type=types.positive_int,
                        help="sequences per microbatch b (default: the preset's)")


def model_config(args: argparse.Namespace):
    """The runner's GPTConfig from ``--model`` and the size flags."""
    from zbsolve.runtime.model import GPTConfig

    overrides = {k: getattr(args, k) for k in MODEL_FLAGS}
    name = "gpt-tiny" if args.model == "gpt" else args.model
    return GPTConfig.preset(name, **overrides)


def add_own_model_args(parser: argparse.ArgumentParser) -> None:
    """``--hf`` / ``--module`` and the sizes only an HF config has (shared with ``run``)."""
    parser.add_argument("--hf", metavar="FAMILY|CONFIG.JSON",
                        help="a Hugging Face causal LM built offline from a config: a family "
                             "(llama, mistral, qwen2, qwen3, mixtral, qwen2-moe, qwen3-moe, "
                             "olmoe) sized by the flags, or a local config.json (flags override; default: "
                             "the built-in GPT presets)")
    parser.add_argument("--module", dest="module_target", metavar="PKG.MOD:BUILD",
                        help="your model: a function returning (layers, example_input, loss_fn) "
                             "(default: none)")
    parser.add_argument("--kv-heads", type=types.positive_int,
                        help="--hf: key/value heads (default: the family's)")
    parser.add_argument("--intermediate", type=types.positive_int,
                        help="--hf: MLP intermediate size (default: the family's)")
    parser.add_argument("--experts", type=types.positive_int,
                        help="--hf MoE: experts per layer (default: the family's)")
    parser.add_argument("--experts-per-token", type=types.positive_int,
                        help="--hf MoE: experts per token (default: the family's)")
    parser.add_argument("--moe-intermediate", type=types.positive_int,
                        help="--hf MoE (qwen): expert MLP size (default: the family's)")


def own_model_spec(args: argparse.Namespace):
    """The ModelSpec of ``--hf``/``--module`` (None when neither is given: the GPT)."""
    target = getattr(args, "module_target", None)
    if getattr(args, "hf", None) is None and target is None:
        return None
    from zbsolve.runtime.models import spec_from_flags

    if args.hf is not None:
        sizes = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "kv_heads",
                                               "intermediate", "vocab", "experts",
                                               "experts_per_token", "moe_intermediate")}
        return spec_from_flags(hf=args.hf, seq=args.seq, microbatch_size=args.microbatch_size,
                               seed=getattr(args, "seed", 0) or 0, **sizes)
    return spec_from_flags(module=target, seed=getattr(args, "seed", 0) or 0)


def add_profile_args(parser: argparse.ArgumentParser) -> None:
    add_model_args(parser)
    parser.add_argument("--devices", type=types.positive_int,
                        help="pipeline devices p (needed for -o; default: none)")
    parser.add_argument("--chunks", type=types.positive_int, default=1, help="chunks per device v (1)")
    parser.add_argument("--microbatches", type=types.positive_int,
                        help="microbatches m (needed for -o; default: none)")
    parser.add_argument("--placement", choices=("loop", "v"), default="loop",
                        help="stage placement with chunks > 1: loop or v (zig-zag) (loop)")
    parser.add_argument("--repeats", type=types.positive_int, default=10,
                        help="timed samples per stage; the median is written")
    parser.add_argument("--warmup", type=types.nonneg_int, default=3, help="discarded samples first")
    parser.add_argument("--sample-interval", type=types.nonneg_number, default=0.0, metavar="SECONDS",
                        help="sleep between sample rounds, to spread the samples over time on a "
                             "shared machine (default: 0)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="CPU timing: wall clock (default) or the thread's CPU time, which "
                             "ignores preemption by other jobs on a shared machine")
    parser.add_argument("--p2p", choices=("pingpong", "handoff"), default="pingpong",
                        help="comm: ping-pong / 2 (default) or a hand-off to a receiver blocked "
                             "in recv while the sender computes (what a pipeline run pays)")
    parser.add_argument("--threads", type=types.positive_int, default=1,
                        help="torch threads while measuring (default: 1, as the runner uses per rank)")
    parser.add_argument("--device", default="cpu", type=types.torch_device,
                        help="cpu or cuda (cuda:N)")
    parser.add_argument("--memory-limit",
                        help="per-device activation budget, e.g. 512MiB or 4GiB (plain number = "
                             "MiB); default: none on CPU, measured on GPU")
    parser.add_argument("--optimizer-states", type=types.nonneg_int, default=0,
                        help="optimizer tensors per parameter for the GPU budget (default: 0 = the "
                             "runner's SGD; Adam: 2)")
    parser.add_argument("--round", type=types.positive_int, metavar="DIGITS",
                        help="write times rounded to DIGITS significant digits (the unrounded "
                             "file goes beside it as NAME.measured.yaml; default: unrounded)")
    parser.add_argument("--name", help="instance name (default: from the sizes)")
    parser.add_argument("--segments", type=int, default=1,
                        help="built-in GPT: also measure each of K sequence segments' F, I, W "
                        "and memory; the instance gets per-segment tables (default: 1, none)")
    parser.add_argument("--segment-lengths", default="equal",
                        help="with --segments: equal, balanced (equal cost for the runner's "
                        "model) or comma-separated token counts summing to --seq (default: "
                        "equal)")
    parser.add_argument("--modes", default=None, metavar="recompute,offload",
                        help="built-in GPT: also measure these memory modes (R and kept of a "
                        "recompute; d2h / h2d copies of an offload, CUDA only) and write their "
                        "recompute: / offload: instance fields (default: none)")


def register(sub) -> None:
    parser = sub.add_parser("profile", help="measure a torch model (the GPT, an HF config, "
                            "your module) into an instance file or a layer profile")
    add_profile_args(parser)
    add_own_model_args(parser)
    parser.add_argument("-o", "--output", help="instance file to write (.yaml or .json; default: none)")
    parser.add_argument("--layer-profile", metavar="FILE",
                        help="--hf/--module: write the per-layer profile (JSON) here (default: none)")
    parser.add_argument("--split", help="--hf/--module: layers per logical stage for -o, e.g. "
                        "3,2,2,3 (default: first and last layer with the end stages, the rest "
                        "even)")
    parser.add_argument("--seed", type=types.seed, default=0, help="--hf/--module: model seed (0)")
    add_json(parser)
    parser.set_defaults(handler=handle)


def measured_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.measured{path.suffix}")


def run_profile(args: argparse.Namespace, command: str):
    """Profile as the flags say; returns the ProfileRun."""
    from zbsolve.profiler import profile
    from zbsolve.profiler.units import parse_size

    limit = parse_size(args.memory_limit) if args.memory_limit is not None else None
    if args.round is not None and args.round < 1:
        raise ValueError(f"--round: expected significant digits >= 1, got {args.round}")
    return profile(
        model_config(args), devices=args.devices, chunks=args.chunks,
        microbatches=args.microbatches, placement=args.placement, repeats=args.repeats,
        warmup=args.warmup, memory_limit=limit, threads=args.threads, device=args.device,
        optimizer_states=args.optimizer_states, interval=args.sample_interval, clock=args.clock,
        p2p_mode=args.p2p, segments=args.segments,
        segment_lengths=_lengths_arg(args.segment_lengths),
        modes=_modes_arg(args.modes),
        name=args.name,
        command=command,
    )


def _modes_arg(text: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip()) if text else ()


def _lengths_arg(text: str) -> str | list[int]:
    if text in ("equal", "balanced"):
        return text
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--segment-lengths: expected equal, balanced or comma-separated "
                         f"token counts, got {text!r}") from None


def write_instances(run, output: str, round_digits: int | None) -> list[Path]:
    """Write the instance (rounded if asked, plus the measured one); each is loaded back."""
    from zbsolve.instance import load_instance
    from zbsolve.profiler.writer import instance_dict

    path = Path(output)
    written = []
    targets = [(path, round_digits)]
    if round_digits is not None:
        targets.append((measured_path(path), None))
    for target, digits in targets:
        inst = load_instance(instance_dict(run, digits))  # strict loader checks what we write
        inst.dump(target)
        load_instance(target)
        written.append(target)
    return written


def handle_own_model(args, spec, command: str) -> int:
    from zbsolve.profiler.layers import profile_spec
    from zbsolve.profiler.own_model import (
        InstanceRequest,
        instance_for_profile,
        parse_split,
        summary_rows,
        write_profile,
    )
    from zbsolve.profiler.units import parse_size
    from zbsolve.profiler.writer import format_table

    if getattr(args, "modes", None):
        raise ValueError("--modes: the memory modes are measured on the built-in GPT (--model) "
                         "only; drop --modes with --hf/--module")
    if not args.output and not args.layer_profile:
        raise ValueError("--hf/--module: nothing to write; give -o INSTANCE (with --devices and "
                         "--microbatches) and/or --layer-profile FILE")
    if args.output and (args.devices is None or args.microbatches is None):
        raise ValueError("-o: an instance needs --devices and --microbatches")
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        prof = profile_spec(spec, warmup=args.warmup, repeats=args.repeats, device=args.device,
                            clock=args.clock, interval=args.sample_interval)
    finally:
        torch.set_num_threads(previous)
    prof.meta["command"] = command
    written = []
    if args.layer_profile:
        written.append(str(write_profile(prof, args.layer_profile)))
    if args.output:
        from zbsolve.instance import load_instance

        req = InstanceRequest(args.devices, args.microbatches, args.chunks, args.placement,
                              parse_split(args.split),
                              parse_size(args.memory_limit) if args.memory_limit else None,
                              args.p2p, args.name)
        inst = instance_for_profile(prof, req, threads=args.threads)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        inst.dump(args.output)
        load_instance(args.output)
        written.append(args.output)
    rows = summary_rows(prof)
    if args.json:
        print_json({"written": written, "layers": rows, "source": prof.source,
                    "fallbacks": prof.meta.get("fallbacks", {})})
        return 0
    print(f"{prof.meta.get('model')}: {prof.source}")
    print(format_table(rows))
    print("wrote " + ", ".join(written))
    return 0


def handle(args) -> int:
    from zbsolve.instance import INSTANCE_SUFFIXES
    from zbsolve.io import check_output
    from zbsolve.profiler.writer import analytic, comparison_rows, format_table

    check_output(args.output, suffixes=INSTANCE_SUFFIXES)  # before minutes of measuring
    if args.round is not None:
        check_output(measured_path(Path(args.output)), suffixes=INSTANCE_SUFFIXES)
    command = "zbsolve " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    spec = own_model_spec(args)
    if spec is not None:
        return handle_own_model(args, spec, command)
    for flag in ("output", "devices", "microbatches"):
        if getattr(args, flag) is None:
            raise ValueError(f"--{flag if flag != 'output' else 'output/-o'}: required for the "
                             "built-in GPT (--model)")
    run = run_profile(args, command)
    written = write_instances(run, args.output, args.round)
    modes = mode_summary(run)
    if args.json:
        print_json({"written": [str(p) for p in written], "stages": comparison_rows(run),
                    "comm_ms": run.comm.to_dict(), "analytic": analytic(run),
                    **({"modes": modes} if run.modes else {})})
        return 0
    print(f"{run.name}: {run.device}, {run.threads} thread(s), {run.clock} clock, median of "
          f"{run.repeats} after {run.warmup} warm-up; analytic = {run.memory_model.label}")
    print(format_table(comparison_rows(run)))
    c = run.comm
    print(f"comm (one-way P2P {run.p2p.get('mode', '')}, {run.p2p.get('bytes', 0)} bytes): "
          f"median {c.median:.4g} ms [min {c.min:.4g}, max {c.max:.4g}]")
    limit = "none" if run.limit_bytes is None else f"{run.limit_bytes[0] / 2**20:.6g} MiB"
    print(f"memory limit per device: {limit} ({run.limit_source})")
    for line in mode_lines(modes):
        print(line)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def mode_summary(run) -> dict:
    """The measured memory modes as written (``meta.modes`` plus the instance fields)."""
    from zbsolve.profiler.writer import mode_fields

    if not run.modes:
        return {}
    fields, meta = mode_fields(run, lambda x: round(x, 6))
    return {**fields, "meta": meta}


def mode_lines(modes: dict) -> list[str]:
    if not modes:
        return []
    out = []
    if "recompute" in modes:
        r, meta = modes["recompute"], modes["meta"]["recompute"]
        out.append("recompute: R ms " + ", ".join(f"{x:.4g}" for x in r["R"]) + "; kept "
                   + ", ".join(f"{x:.1%}" for x in meta["kept_fraction"])
                   + " of the activation (selective: " + meta["selective"] + ")")
    off = modes["meta"].get("offload")
    if isinstance(off, str):
        out.append(f"offload: copy times {off}")
    elif off is not None:
        o = modes["offload"]
        out.append("offload: d2h ms " + ", ".join(f"{x:.4g}" for x in o["d2h"]) + ", h2d ms "
                   + ", ".join(f"{x:.4g}" for x in o["h2d"]) + "; d2h GB/s "
                   + ", ".join(f"{x:.3g}" for x in off["d2h_GB_per_s"]))
    return out
