"""From measurements to the foundation instance schema (and the measured-vs-analytic table).

Pure Python on purpose: the writer, its rounding and its table are tested without torch.

Units written: times and ``comm`` in milliseconds, memory in MiB (2**20 bytes) per microbatch
and stage; the file's ``description`` says so. How the measured bytes map onto the instance's
memory model (F allocates ``activation``; I frees ``activation - weight``; W frees ``weight``):

- ``weight`` = the bytes the deferred weight-gradient store holds after I (layer inputs *and*
  output gradients; the latter are created by I, so they are not a part of what F saved);
- ``activation`` = max(bytes F saved, ``weight``). When the store outgrows what F saved (fp32,
  no dropout, fused attention: the analytic M_W then equals M_B), the memory between I and W is
  really higher than after F; raising ``activation`` to ``weight`` keeps the model an upper
  bound of the real memory at every instant instead of under-counting. Stages where this
  happened are listed in ``meta.memory.raised_to_weight`` and the raw figures stay in ``meta``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zbsolve.profiler.analytic import LayerMemoryModel, layer_bytes_per_token, paper_m_b, paper_m_w
from zbsolve.profiler.analytic import stage_estimate as _stage_estimate
from zbsolve.profiler.records import SegmentProfile, StageProfile
from zbsolve.profiler.timing import Spread
from zbsolve.profiler.units import MEMORY_UNIT, MIB, TIME_UNIT, round_significant

# The runner's model: fp32 activations, no dropout, scaled_dot_product_attention (fused on CPU
# and CUDA: only a log-sum-exp per head and token is kept, not the s x s probabilities).
RUNNER_MODEL = LayerMemoryModel(dtype_bytes=4, dropout=False, fused_attention=True)
CPU_COPIES = ("not measured on CPU: a host copy there is a memory clone, not a device-host "
              "transfer; profile with --device cuda for d2h / h2d (pinned memory, copy stream)")


@dataclass(frozen=True)
class ProfileRun:
    """Everything one ``zbsolve profile`` measured and the setting it measured in."""

    name: str
    model: dict[str, int]  # layers, hidden, heads, seq, vocab, microbatch_size, seed
    devices: int
    microbatches: int
    chunks: int
    placement: str  # loop | v
    stages: list[StageProfile]
    comm: Spread  # one-way hand-off latency, ms
    p2p: dict[str, Any]
    limit_bytes: list[float] | None  # per device, None = unlimited
    limit_source: str
    device: str
    threads: int
    warmup: int
    repeats: int
    torch_version: str = ""
    command: str = ""
    clock: str = "wall"  # wall | cpu (thread CPU time) | (CUDA: events, reported as wall)
    memory_model: LayerMemoryModel = field(default=RUNNER_MODEL)
    segments: tuple[SegmentProfile, ...] = ()  # per stage, with sequence segments (k > 1)
    modes: tuple[str, ...] = ()  # memory modes measured (each stage's ``modes``)


def _mib(x: float) -> float:
    return round(x / MIB, 6)


def analytic(run: ProfileRun) -> list[dict[str, Any]]:
    """Per stage: the analytic bytes and the relative difference of the measurement from them."""
    cfg = run.model
    out = []
    for st in run.stages:
        est = _stage_estimate(
            layers=st.layers, h=cfg["hidden"], a=cfg["heads"], s=cfg["seq"],
            b=cfg["microbatch_size"], vocab=cfg["vocab"], first=st.first, last=st.last,
            model=run.memory_model,
        )
        out.append({
            "stage": st.stage,
            "activation_bytes": est.activation,
            "weight_bytes": est.weight,
            "rel_diff_activation": (st.saved_bytes - est.activation) / est.activation,
            "rel_diff_weight": (st.held_bytes - est.weight) / est.weight,
            "extras": est.extras,
        })
    return out


def memory_bytes(st: StageProfile) -> tuple[float, float]:
    """(activation, weight) in bytes for the instance, per the mapping in the module docstring."""
    return max(st.saved_bytes, st.held_bytes), st.held_bytes


def instance_dict(run: ProfileRun, round_digits: int | None = None) -> dict[str, Any]:
    """The instance (foundation schema) with the spread and the analytic estimate under ``meta``.

    ``round_digits`` rounds F, I, W and comm to that many significant digits (profiling noise is
    larger than the last digits); the unrounded medians stay in ``meta.measured``.
    """
    def rnd(x: float) -> float:
        return round_significant(x, round_digits) if round_digits else round(x, 6)

    times = {k: [rnd(getattr(st, k).median) for st in run.stages] for k in ("F", "I", "W")}
    mem = [memory_bytes(st) for st in run.stages]
    raised = [st.stage for st in run.stages if st.held_bytes > st.saved_bytes]
    cfg = run.model
    h, a, s = cfg["hidden"], cfg["heads"], cfg["seq"]
    m_b, m_w = layer_bytes_per_token(h, a, s, run.memory_model)
    description = (
        f"Profiled GPT (layers={cfg['layers']}, hidden={h}, heads={a}, seq={s}, "
        f"microbatch={cfg['microbatch_size']}, vocab={cfg['vocab']}) on {run.device}, "
        f"{run.threads} thread(s): times ({run.clock} clock) and comm in {TIME_UNIT} (median of "
        f"{run.repeats} after "
        f"{run.warmup} warm-up"
        + (f", rounded to {round_digits} significant digits" if round_digits else "")
        + f"); memory in {MEMORY_UNIT} per microbatch and stage"
        + (", limit per device" if run.limit_bytes else ", no limit")
        + ". Spread and analytic estimate under meta."
    )
    memory = {"activation": [_mib(x) for x, _ in mem], "weight": [_mib(w) for _, w in mem]}
    data = {
        "name": run.name,
        "devices": run.devices,
        "microbatches": run.microbatches,
        "chunks": run.chunks,
        "placement": run.placement,
        "times": times,
        "comm": rnd(run.comm.median),
        "memory": {
            **memory,
            "limit": None if run.limit_bytes is None else [_mib(x) for x in run.limit_bytes],
        },
        "description": description,
        "source": run.command or "zbsolve profile",
        "meta": {
            "units": {"time": TIME_UNIT, "comm": TIME_UNIT, "memory": MEMORY_UNIT},
            "model": dict(cfg),
            "device": run.device,
            "threads": run.threads,
            "clock": run.clock,
            "torch": run.torch_version,
            "warmup": run.warmup,
            "repeats": run.repeats,
            "rounded_significant_digits": round_digits,
            "layers_per_stage": [st.layers for st in run.stages],
            "measured": {k: [round(getattr(st, k).median, 6) for st in run.stages]
                         for k in ("F", "I", "W")} | {"comm": round(run.comm.median, 6)},
            "spread": {k: [getattr(st, k).to_dict() for st in run.stages] for k in ("F", "I", "W")}
            | {"comm": run.comm.to_dict()},
            "p2p": run.p2p,
            "memory": {
                "method": run.stages[0].memory_method,
                "saved_by_F_bytes": [st.saved_bytes for st in run.stages],
                "held_for_W_bytes": [st.held_bytes for st in run.stages],
                "raised_to_weight": raised,
                "param_bytes": [st.param_bytes for st in run.stages],
                "limit_source": run.limit_source,
            },
            "analytic": {
                "formula": "per token and layer: M_B = 34h + 5as bytes, M_W = 32h bytes "
                           "(fp16, dropout, materialised softmax)",
                "paper_bytes_per_token_layer": {"M_B": paper_m_b(h, a, s), "M_W": paper_m_w(h)},
                "variant": run.memory_model.label,
                "variant_bytes_per_token_layer": {"M_B": m_b, "M_W": m_w},
                "stages": analytic(run),
            },
        },
    }
    if run.modes:
        fields, data["meta"]["modes"] = mode_fields(run, rnd)
        data.update(fields)
    if run.segments:
        data.update(_segment_fields(run, rnd))
        data["meta"]["segments"] = _segment_meta(run, rnd)
        data["times"] = {k: [[rnd(x.median) for x in getattr(sp, k)] for sp in run.segments]
                         for k in ("F", "I", "W")}
        data["memory"].update(_segment_memory(run.segments))
    return data


def mode_fields(run: ProfileRun, rnd) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``recompute`` / ``offload`` instance fields from what was measured (as the instance
    loader reads them: per stage, times in ms, memory in MiB), and ``meta.modes``: the kept
    fractions, spreads, bandwidths and what was not measured, with the reason."""
    activation = [memory_bytes(st)[0] for st in run.stages]
    profiles = [st.modes for st in run.stages]
    fields: dict[str, Any] = {}
    meta: dict[str, Any] = {"measured": list(run.modes)}
    if "recompute" in run.modes:
        assert all(p is not None and p.R is not None and p.kept_bytes is not None
                   for p in profiles)
        fields["recompute"] = {"R": [rnd(p.R.median) for p in profiles],
                               "kept": [_mib(p.kept_bytes) for p in profiles]}
        meta["recompute"] = {
            "R_spread": [p.R.to_dict() for p in profiles],
            "kept_bytes": [p.kept_bytes for p in profiles],
            "kept_fraction": [round(p.kept_bytes / a, 6) for p, a in zip(profiles, activation)],
            "what": "R: the stage's forward re-run from its kept input (graph and saved tensors "
                    "rebuilt); kept: the stage input (and targets on the last stage)",
            "selective": "not measured: the runner's models have no selective variant",
        }
    if "offload" in run.modes:
        if all(p is not None and p.d2h is not None for p in profiles):
            moved = [p.moved_bytes for p in profiles]
            fields["offload"] = {
                "fraction": [round(m / a, 6) for m, a in zip(moved, activation)],
                "d2h": [rnd(p.d2h.median) for p in profiles],
                "h2d": [rnd(p.h2d.median) for p in profiles]}
            meta["offload"] = {
                "moved_bytes": moved,
                "d2h_spread": [p.d2h.to_dict() for p in profiles],
                "h2d_spread": [p.h2d.to_dict() for p in profiles],
                "d2h_GB_per_s": [round(m / p.d2h.median / 1e6, 3) for m, p in zip(moved, profiles)],
                "h2d_GB_per_s": [round(m / p.h2d.median / 1e6, 3) for m, p in zip(moved, profiles)],
                "what": "the stage's saved tensors (its input and output stay on the device), "
                        "pinned host memory, one copy stream; each copy timed to its end",
            }
        else:
            meta["offload"] = CPU_COPIES
    return fields, meta


def _segment_memory(profiles: tuple[SegmentProfile, ...]) -> dict[str, Any]:
    """Per stage and segment, (activation, weight) by the mapping in the module docstring."""
    return {
        "activation": [[_mib(max(a, w)) for a, w in zip(sp.saved_bytes, sp.held_bytes)]
                       for sp in profiles],
        "weight": [[_mib(w) for w in sp.held_bytes] for sp in profiles],
    }


def _segment_fields(run: ProfileRun, rnd) -> dict[str, Any]:
    """The segment keys of the instance (lengths in tokens, the model shape)."""
    lengths = list(run.segments[0].lengths)
    return {
        "segments": len(lengths),
        "segment_lengths": lengths,
        "segment_model": {"seq": run.model["seq"], "hidden": run.model["hidden"],
                          "heads": run.model["heads"], "vocab": run.model["vocab"],
                          "layers": [st.layers for st in run.stages], "attention": "dense"},
    }


def _segment_meta(run: ProfileRun, rnd) -> dict[str, Any]:
    """What was measured per segment (``meta.segments``), and the whole-microbatch times."""
    profiles = run.segments
    return {
        "lengths": list(profiles[0].lengths),
        "whole_microbatch": {k: [rnd(getattr(st, k).median) for st in run.stages]
                             for k in ("F", "I", "W")},
        "spread": {k: [[x.to_dict() for x in getattr(sp, k)] for sp in profiles]
                   for k in ("F", "I", "W")},
        "saved_by_F_bytes": [list(sp.saved_bytes) for sp in profiles],
        "held_for_W_bytes": [list(sp.held_bytes) for sp in profiles],
        "kv_bytes": [list(sp.kv_bytes) for sp in profiles],
    }


def comparison_rows(run: ProfileRun) -> list[dict[str, Any]]:
    """One row per stage: times with their noise, and measured vs analytic memory (MiB)."""
    rows = []
    for st, an in zip(run.stages, analytic(run)):
        rows.append({
            "stage": st.stage,
            "layers": st.layers,
            "F ms": st.F.median,
            "I ms": st.I.median,
            "W ms": st.W.median,
            "IQR/med": max(x.rel_iqr for x in (st.F, st.I, st.W)),
            "act MiB": st.saved_bytes / MIB,
            "act analytic": an["activation_bytes"] / MIB,
            "act diff": an["rel_diff_activation"],
            "W-kept MiB": st.held_bytes / MIB,
            "W analytic": an["weight_bytes"] / MIB,
            "W diff": an["rel_diff_weight"],
        })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table (no pandas needed)."""
    if not rows:
        return ""
    cols = list(rows[0])

    def cell(v: Any, col: str) -> str:
        if isinstance(v, float):
            return f"{v:+.1%}" if "diff" in col or col == "IQR/med" else f"{v:.4g}"
        return str(v)

    cells = [[cell(r[c], c) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
