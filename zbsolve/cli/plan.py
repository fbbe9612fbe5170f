"""``zbsolve plan --hf llama --layers 32 ... --gpus 8 --gpu h100 --global-batch 64``: plan a run.

Chooses the layer split, the microbatch count (where the batch leaves a choice), the chunks and
placement and the schedule under the device memory, from the analytic cost model
(``zbsolve.plan``) or a measured layer profile (``--profile``, as ``zbsolve.layers`` writes it).
A torch module (``--module``) is the profiler's input, not the planner's: profile it into a layer
profile first and pass that with ``--profile``.
"""

from __future__ import annotations

import argparse

from zbsolve.cli.common import add_json, print_json


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def register(sub) -> None:
    parser = sub.add_parser("plan", help="choose split, layout, microbatches and schedule for a "
                                         "model on GPUs you may not have yet")
    model = parser.add_argument_group("model (a family and sizes, a config.json, or a profile)")
    model.add_argument("--hf", metavar="FAMILY",
                       help="gpt (Megatron GPT), llama, mistral, qwen2 or mixtral (default: none; give "
                            "--hf, --hf-config or --profile)")
    model.add_argument("--hf-config", metavar="JSON", help="a Hugging Face config.json (default: none)")
    model.add_argument("--profile", metavar="JSON",
                       help="a measured layer profile (zbsolve-layers JSON) instead of the model "
                            "(default: none)")
    for flag, what in (("layers", "decoder blocks L"), ("hidden", "hidden size h"),
                       ("heads", "attention heads a"), ("kv-heads", "key/value heads (GQA)"),
                       ("ffn", "MLP intermediate size"), ("seq", "sequence length s"),
                       ("vocab", "vocabulary size V"), ("experts", "MoE: routed experts"),
                       ("top-k", "MoE: experts per token"),
                       ("expert-ffn", "MoE: intermediate size of an expert"),
                       ("shared-ffn", "MoE: shared expert intermediate size")):
        model.add_argument(f"--{flag}", type=int, help=f"{what} (default: the family's)")
    hw = parser.add_argument_group("cluster and batch")
    hw.add_argument("--gpus", type=int, required=True, help="GPUs in all")
    hw.add_argument("--gpu", default="h100", help="a100, h100 or h200 (h100)")
    hw.add_argument("--pp", type=int, help="pipeline ranks (default: every GPU)")
    hw.add_argument("--global-batch", type=int, required=True, help="sequences per step")
    hw.add_argument("--microbatch-size", type=int,
                    help="sequences per microbatch (default: try every size the batch allows)")
    hw.add_argument("--efficiency", type=float,
                    help="achievable fraction of peak FLOPS and bandwidth (default: the "
                         "accelerator's: A100 0.73 fitted, H100/H200 0.65 assumed)")
    hw.add_argument("--memory-fraction", type=float, default=0.9,
                    help="usable fraction of the GPU memory (0.9)")
    search = parser.add_argument_group("search")
    search.add_argument("--chunks", type=_ints, default=[1, 2], help="chunks per device (1,2)")
    search.add_argument("--placements", type=_names, default=["loop", "v"],
                        help="placements of multi-chunk layouts (loop,v)")
    search.add_argument("--placement-list", type=_ints,
                        help="an explicit placement: one device id per logical stage (default: none)")
    search.add_argument("--time-limit", type=float, default=120.0,
                        help="seconds for the whole plan, a hard wall-clock budget (120)")
    search.add_argument("--candidates", type=int, default=4,
                        help="splits solved per case besides the rule splits (4)")
    search.add_argument("--jobs", type=int, default=2, help="parallel cases (2)")
    search.add_argument("--workers", type=int, default=1, help="CP-SAT threads per case (1)")
    search.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (0)")
    search.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="fan the cases out over a Ray cluster (no ADDRESS: a local Ray; default: "
                             "local processes)")
    search.add_argument("--progress", action="store_true", help="progress bars on stderr")
    parser.add_argument("-o", "--output", default="zbsolve-plan",
                        help="folder for schedule.json, instance.yaml, timeline.png, plan.json")
    add_json(parser)
    parser.set_defaults(handler=handle)


def config_from_args(args):
    from zbsolve.layers import LayerProfile
    from zbsolve.plan.accelerators import accelerator
    from zbsolve.plan.planner import ChunkLayout, PlanConfig
    from zbsolve.plan.shapes import SIZE_FLAGS, shape_from_flags

    model = profile = None
    if args.profile:
        if args.hf or args.hf_config:
            raise ValueError("--profile: give either a profile or a model (--hf/--hf-config)")
        profile = LayerProfile.load(args.profile)
    else:
        sizes = {k: getattr(args, k) for k in SIZE_FLAGS}
        moe = {k: getattr(args, k) for k in ("experts", "top_k", "expert_ffn", "shared_ffn")}
        model = shape_from_flags(args.hf, args.hf_config, sizes, moe)
    if args.placement_list:
        chunks, rem = divmod(len(args.placement_list), args.pp or args.gpus)
        if rem or chunks < 1:
            raise ValueError(f"--placement-list: {len(args.placement_list)} stages are not a "
                             f"multiple of the {args.pp or args.gpus} pipeline ranks")
        layouts = [ChunkLayout(chunks, tuple(args.placement_list))]
    else:
        layouts = sorted({ChunkLayout(c, "loop" if c == 1 else p)
                          for c in args.chunks for p in args.placements},
                         key=lambda lay: (lay.chunks, str(lay.placement)))
        bad = [c for c in args.chunks if c < 1] + [p for p in args.placements
                                                    if p not in ("loop", "v")]
        if bad:
            raise ValueError(f"--chunks/--placements: expected chunks >= 1 and loop/v, got "
                             f"{bad[0]!r}")
    return PlanConfig(
        accelerator=accelerator(args.gpu), gpus=args.gpus, global_batch=args.global_batch,
        model=model, profile=profile, pp=args.pp, microbatch_size=args.microbatch_size,
        layouts=layouts, efficiency=args.efficiency, memory_fraction=args.memory_fraction,
        time_limit=args.time_limit, candidates=args.candidates, jobs=args.jobs,
        backend="ray" if args.ray is not None else "local", address=args.ray or None,
        workers=args.workers, seed=args.seed, progress=args.progress)


def handle(args) -> int:
    import json
    import time
    from pathlib import Path

    from zbsolve.io import atomic_write_text
    from zbsolve.plan.planner import plan
    from zbsolve.plan.report import format_text, jsonable, plan_dict, write_files

    started = time.monotonic()  # --time-limit covers the files and the picture too
    result = plan(config_from_args(args), started)
    files = write_files(result, args.output)
    data = jsonable(plan_dict(result, files))
    path = Path(args.output) / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data["files"]["plan"] = str(path)
    atomic_write_text(path, json.dumps(data, indent=1))
    if args.json:
        print_json(data)
    else:
        print(format_text(data))
        print("wrote " + ", ".join(data["files"].values()))
    return 0 if data.get("split") is not None else 1
