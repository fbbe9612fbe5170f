"""A plan's figures for people and machines: the JSON object, the text tables, the files.

Every step time, bubble and activation peak is the simulator's (via ``zbsolve.solver.solve``);
peak memory per device adds the static bytes (weights, gradients, Adam states: 18 bytes per
parameter) to the schedule's activation peak and is given in GB (10^9 bytes). Tokens/s is the
global batch's tokens over the step time (pipeline makespan only: no data-parallel gradient
reduction and no optimizer step are modelled).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from zbsolve.io import atomic_write_text
from zbsolve.layers import GIB
from zbsolve.plan.evaluate import SplitResult
from zbsolve.plan.planner import RULE_NAMES, PlanCase, PlanResult


def _stack_keys(inst, sched, split: list[int], *, layer_names: list[str], microbatch_size: int,
                chunks: int) -> dict[str, Any]:
    """The torchtitan config and Megatron flags of the plan (the stack exporters')."""
    from zbsolve.export.megatron import megatron_flags
    from zbsolve.export.torchtitan import torchtitan_config

    return {"torchtitan": torchtitan_config(inst, sched, split, layer_names=layer_names,
                                            microbatch_size=microbatch_size),
            "megatron": megatron_flags(split, embedding_layers=1, head_layers=1, chunks=chunks)}


def blocks_per_stage(case: PlanCase, split) -> list[int]:
    """Decoder blocks of each stage (the split counts the embedding and the head too)."""
    meta = case.problem.profile.meta
    out = list(split)
    out[0] -= int(meta.get("embedding_layers", 1))
    out[-1] -= int(meta.get("head_layers", 1))
    return out


def _tokens_per_s(case: PlanCase, step_ms: float) -> float | None:
    if not case.tokens_per_step or not math.isfinite(step_ms) or step_ms <= 0:
        return None
    return case.tokens_per_step / (step_ms / 1e3)


def schedule_rows(case: PlanCase, res: SplitResult) -> list[dict[str, Any]]:
    """Every hand-made schedule of the chosen split and the solver's, as table rows."""
    rows = []
    for r in res.hand_made:
        if "reason" in r:
            rows.append({"schedule": r["name"], "applies": False, "reason": r["reason"]})
            continue
        rows.append(_row(case, res, r["name"], r))
    rows.append(_row(case, res, f"zbsolve ({res.status})", res.figures))
    return rows


def _row(case: PlanCase, res: SplitResult, name: str, fig: dict[str, Any]) -> dict[str, Any]:
    peak = res.peak_gb(fig["peak_memory"])
    return {"schedule": name, "applies": True, "step_time_ms": fig["makespan"],
            "bubble": fig["bubble_makespan"], "peak_gb": peak, "peak_gb_max": max(peak),
            "fits_memory": bool(fig["feasible"]),
            "tokens_per_s": _tokens_per_s(case, fig["makespan"])}


def rule_rows(result: PlanResult, case: PlanCase, best: SplitResult) -> dict[str, Any]:
    """Each rule's split on the chosen case, solved under the same memory, and the gain."""
    out = {}
    for name in RULE_NAMES:
        split = case.rules.get(name)
        if not isinstance(split, tuple):
            out[name] = {"applies": False, "reason": split}
            continue
        res = result.results.get((case.key, split))
        if res is None:
            out[name] = {"split": list(split), "evaluated": False}
            continue
        entry: dict[str, Any] = {"split": list(split),
                                 "blocks_per_stage": blocks_per_stage(case, split),
                                 "status": res.status, "step_time_ms": res.step_ms}
        if res.found:
            entry.update(peak_gb=res.peak_gb(), peak_gb_max=max(res.peak_gb()),
                         tokens_per_s=_tokens_per_s(case, res.step_ms),
                         gain=(res.step_ms - best.step_ms) / res.step_ms,
                         schedule=res.schedule_name)
            same = result.at_rule_peak.get(name)
            if same is not None and same.found:
                entry["plan_at_rule_peak"] = {
                    "step_time_ms": same.step_ms, "peak_gb_max": max(same.peak_gb()),
                    "status": same.status, "gain": (res.step_ms - same.step_ms) / res.step_ms}
                # gain: how much faster than the rule the plan's split is within its peak
            entry["best_layout"] = _rule_best_layout(result, name, best)
        out[name] = entry
    return out


def _rule_best_layout(result: PlanResult, name: str, best: SplitResult) -> dict[str, Any] | None:
    """The rule on the layout and microbatch size where it does best."""
    found = []
    for case in result.cases:
        split = case.rules.get(name)
        res = result.results.get((case.key, split)) if isinstance(split, tuple) else None
        if res is not None and res.found:
            found.append((res.step_ms, case.key, res))
    if not found:
        return None
    step, key, res = min(found, key=lambda t: (t[0], t[1]))
    return {"case": key, "step_time_ms": step, "peak_gb_max": max(res.peak_gb()),
            "gain": (step - best.step_ms) / step}


def case_rows(result: PlanResult) -> list[dict[str, Any]]:
    rows = []
    for case in result.cases:
        solved = result.solved(case.key)
        best = min((r.step_ms for r in solved.values()), default=math.inf)
        search = result.searches.get(case.key)
        rows.append({"case": case.key, "chunks": case.layout.chunks,
                     "placement": case.layout.placement if isinstance(case.layout.placement, str)
                     else list(case.layout.placement),
                     "microbatch_size": case.microbatch_size,
                     "microbatches": case.problem.microbatches,
                     "best_step_time_ms": best if math.isfinite(best) else None,
                     "lower_bound_ms": result.case_lower(case.key) if search else None,
                     "splits_solved": len(solved),
                     "splits_enumerated": len(search.enumerated) if search else 0,
                     "enumeration_complete": search.complete if search else False})
    return rows


def _no_plan(result: PlanResult) -> str:
    """Why there is no plan: an interrupt, a limit that ran out before any split was solved,
    or splits solved and none fitting (only then is "no schedule fits" true)."""
    if result.interrupted:
        return "interrupted before any schedule was found"
    counts = {stage: result.fanout.get(stage) or {} for stage in ("search", "solve")}
    if not counts["solve"].get("ok"):
        left = sum(c.get("skipped", 0) + c.get("timeout", 0) for c in counts.values())
        if left:
            return (f"the --time-limit of {result.config.time_limit:g} s ran out before any "
                    f"split was solved ({left} searches and solves skipped or timed out); "
                    "give a longer --time-limit")
    return "no schedule fits: every split evaluated is infeasible or failed"


def plan_dict(result: PlanResult, files: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``--json`` object."""
    cfg = result.config
    out: dict[str, Any] = {
        "model": cfg.model.name if cfg.model is not None else cfg.profile.source,
        "accelerator": cfg.accelerator.name, "gpus": cfg.gpus,
        "pipeline_ranks": cfg.pipeline_ranks, "data_parallel": cfg.data_parallel,
        "global_batch": cfg.global_batch, "usable_memory_gb": cfg.usable_bytes / 1e9,
        "optimizer_bytes_per_param": 18, "seconds": result.seconds,
        "interrupted": result.interrupted, "notes": result.notes, "fanout": result.fanout,
        "cases": case_rows(result), "files": files or {},
    }
    if result.best is None:
        out.update(split=None, schedule=None, step_time_ms=None, peak_gb=None,
                   tokens_per_s=None, torchtitan=None, megatron=None, error=_no_plan(result))
        return out
    case, res = result.best
    lower = result.lower_bound
    inst = case.problem.instance(res.split)
    from zbsolve.schedule import Schedule

    sched = Schedule.from_dict(res.schedule)
    out.update({
        "case": case.key, "chunks": case.layout.chunks,
        "placement": case.layout.placement if isinstance(case.layout.placement, str)
        else list(case.layout.placement),
        "microbatch_size": case.microbatch_size, "microbatches": case.problem.microbatches,
        "split": list(res.split), "blocks_per_stage": blocks_per_stage(case, res.split),
        "schedule": res.schedule_name, "status": res.status, "step_time_ms": res.step_ms,
        "bubble": res.figures["bubble_makespan"], "peak_gb": res.peak_gb(),
        "peak_gb_max": max(res.peak_gb()),
        "static_gb": [x * GIB / 1e9 for x in res.static_gib],
        "tokens_per_s": _tokens_per_s(case, res.step_ms), "comm_ms": case.problem.comm,
        "lower_bound_ms": lower, "gap": (res.step_ms - lower) / res.step_ms,
        "claim": claim_text(result), "table": schedule_rows(case, res),
        "rules": rule_rows(result, case, res),
    })
    out.update(_stack_keys(inst, sched, list(res.split),
                           layer_names=[layer.name for layer in case.problem.profile.layers],
                           microbatch_size=case.microbatch_size, chunks=case.layout.chunks))
    return out


def claim_text(result: PlanResult) -> str:
    case, res = result.best
    lower = result.lower_bound
    gap = (res.step_ms - lower) / res.step_ms
    scope = (f"over every contiguous split of the {len(result.cases)} case(s) searched "
             "(layouts x microbatch sizes), under the instance model")
    if gap <= 1e-4:
        return f"optimal (within {gap:.2e}) {scope}: no split and schedule is faster than " \
               f"{lower:.1f} ms"
    return f"within {100 * gap:.2f} % of optimal {scope}: no split and schedule is faster " \
           f"than {lower:.1f} ms"


def write_files(result: PlanResult, out_dir: str | Path) -> dict[str, str]:
    """schedule.json, instance.yaml and timeline.png of the chosen plan (atomic writes)."""
    if result.best is None:
        return {}
    from zbsolve.plot import save_timeline
    from zbsolve.schedule import Schedule

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    case, res = result.best
    inst = case.problem.instance(res.split, name=f"plan-{case.key}")
    sched = Schedule.from_dict(res.schedule)
    files = {}
    path = out / "schedule.json"
    atomic_write_text(path, json.dumps(sched.to_dict(), indent=1))
    files["schedule"] = str(path)
    path = out / "instance.yaml"
    inst.dump(path)
    files["instance"] = str(path)
    path = out / "timeline.png"
    title = (f"{case.key}: split {list(res.split)}, {res.step_ms:.1f} ms "
             "(memory panels: activations in GiB)")
    save_timeline(inst, sched, path, title=title)
    files["timeline"] = str(path)
    return files


def jsonable(value: Any) -> Any:
    """The value with infinities and NaNs as None (JSON has neither) and tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def format_text(data: dict[str, Any]) -> str:
    """The plan for a terminal: the choice, every schedule of the chosen split, the rules."""
    lines = [f"{data['model']} on {data['gpus']} x {data['accelerator']} "
             f"(pipeline {data['pipeline_ranks']}, data parallel {data['data_parallel']}), "
             f"global batch {data['global_batch']}, {data['usable_memory_gb']:.1f} GB usable "
             "per GPU"]
    if data.get("split") is None:
        lines.append(data.get("error", "no plan"))
        return "\n".join(lines)
    if data.get("interrupted"):
        lines.append("interrupted: the best of what finished")
    lines += [
        f"plan: {data['case']} ({data['chunks']} chunk(s), placement {data['placement']}, "
        f"microbatch {data['microbatch_size']} x {data['microbatches']})",
        f"split (layers per stage, embedding and head count 1): {data['split']}",
        f"decoder blocks per stage: {data['blocks_per_stage']}",
        f"step {data['step_time_ms']:.1f} ms, bubble {100 * data['bubble']:.2f} %, "
        f"peak {max(data['peak_gb']):.1f} GB, "
        + (f"{data['tokens_per_s']:,.0f} tokens/s" if data['tokens_per_s'] else ""),
        f"claim: {data['claim']}", "",
        f"{'schedule':<22}{'step ms':>10}{'bubble %':>10}{'peak GB':>9}{'tokens/s':>12}  fits",
    ]
    for row in data["table"]:
        if not row["applies"]:
            continue
        tps = f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] else "-"
        lines.append(f"{row['schedule']:<22}{row['step_time_ms']:>10.1f}"
                     f"{100 * row['bubble']:>10.2f}{row['peak_gb_max']:>9.1f}{tps:>12}  "
                     f"{'yes' if row['fits_memory'] else 'NO'}")
    skipped = [r["schedule"] for r in data["table"] if not r["applies"]]
    if skipped:
        lines.append("not applicable: " + ", ".join(skipped))
    lines.append("")
    lines.append("layer-split rules on the same layout and memory (each solved by zbsolve):")
    for name, rule in data["rules"].items():
        if not rule.get("applies", True):
            lines.append(f"  {name}: does not apply ({rule['reason']})")
        elif "gain" not in rule:
            lines.append(f"  {name}: {rule['split']} not evaluated or infeasible")
        else:
            lines.append(f"  {name}: blocks {rule['blocks_per_stage']}: "
                         f"{rule['step_time_ms']:.1f} ms, peak {rule['peak_gb_max']:.1f} GB; "
                         f"the plan is {100 * rule['gain']:.1f} % faster")
            same = rule.get("plan_at_rule_peak")
            if same:
                lines.append(f"    the plan's split within that peak: {same['step_time_ms']:.1f}"
                             f" ms, peak {same['peak_gb_max']:.1f} GB ({same['status']})")
            where = rule.get("best_layout")
            if where and where["case"] != data["case"]:
                lines.append(f"    the rule's best case, {where['case']}: "
                             f"{where['step_time_ms']:.1f} ms; the plan is "
                             f"{100 * where['gain']:.1f} % faster")
    return "\n".join(lines)
