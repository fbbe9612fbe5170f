"""Layouts a sweep compares: how many chunks per device and how the chunks are placed.

A sweep asks "what if this model ran with 2 chunks in a V?" of an instance written for one
layout, so the instance has to be re-cut. The model is the sequence of logical stages; re-cutting
keeps that sequence and its totals: going from v0 to k*v0 chunks splits every stage into k
pieces, going down merges k consecutive stages (summed). Per-hop comm is unchanged, as in the ZB
papers (T_comm is not scaled with the chunk).

How a stage splits: into k equal parts of its "body", where the body is the stage's value capped
at the median over stages. What the first stage has above the median (the embedding) goes to its
first piece, what the last stage has above it (the LM head and loss) to its last piece; an
interior stage above the median splits evenly. For a transformer the embedding and the head are
the only parts that are not a stack of equal layers, so this keeps them where they live instead
of smearing the head over two devices; a uniform instance splits evenly.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from zbsolve.instance import PLACEMENTS, Instance, InstanceError, refit_segment_lengths


@dataclass(frozen=True, order=True)
class Layout:
    chunks: int
    placement: str  # loop | v (identical for one chunk, so one chunk is always 'loop')
    segments: int = 1  # sequence segments per microbatch (zbsolve.segments)

    @property
    def label(self) -> str:
        """Short CSV-friendly name: ``c1``, ``loop-c2``, ``v-c2``; ``-k4`` with 4 segments."""
        base = "c1" if self.chunks == 1 else f"{self.placement}-c{self.chunks}"
        return base if self.segments == 1 else f"{base}-k{self.segments}"


def layouts_for(inst: Instance, chunks: list[int] | None, placements: list[str] | None,
                segments: list[int] | None = None) -> list[Layout]:
    """The distinct layouts of a sweep; defaults to the instance's own layout.

    With one chunk, loop and V place stage s on device s alike, so they collapse to one layout
    rather than solving the same case twice. ``segments``: sequence segment counts, a layout
    dimension of its own (each microbatch cut into k pieces along the sequence).
    """
    segments = segments or [inst.segments]
    for k in segments:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InstanceError(f"--segments: expected integers >= 1, got {k!r}")
    if inst.placement_kind == "explicit":
        if chunks or placements:
            raise InstanceError(
                "placement: the instance has an explicit placement, so --chunks/--placements "
                "cannot re-cut it; give it placement: loop or v, or drop those options"
            )
        return sorted({Layout(inst.chunks, "explicit", k) for k in segments})
    chunks = chunks or [inst.chunks]
    placements = placements or [inst.placement_kind]
    for c in chunks:
        if c < 1:
            raise InstanceError(f"--chunks: expected integers >= 1, got {c}")
    for kind in placements:
        if kind not in PLACEMENTS:
            raise InstanceError(f"--placements: expected loop and/or v, got {kind!r}")
    out = {Layout(c, "loop" if c == 1 else kind, k) for c in chunks for kind in placements
           for k in segments}
    return sorted(out)


def _recut(values: tuple[float, ...], v0: int, v: int, p: int) -> list[float]:
    if v % v0 == 0:
        k = v // v0
        median = statistics.median(values)
        last = len(values) - 1
        out = []
        for s, x in enumerate(values):
            body = min(x, median) if s in (0, last) else x
            pieces = [body / k] * k
            if s == 0:
                pieces[0] += x - body
            elif s == last:
                pieces[-1] += x - body
            out.extend(round(x, 12) for x in pieces)  # no 9.860000000000001 noise
        return out
    k = v0 // v
    return [sum(values[i * k:(i + 1) * k]) for i in range(p * v)]


def relayout(inst: Instance, layout: Layout) -> Instance:
    """``inst`` re-cut into ``layout`` (same model, same totals), with no memory limit.

    Another segment count splits each stage's whole-microbatch figures again by the instance's
    segment rule and costs (``segment_lengths``, ``segment_costs``); explicit per-segment tables
    are kept only in the instance's own layout.
    """
    own = (layout.chunks, layout.segments) == (inst.chunks, inst.segments) and (
        layout.placement in ("explicit", inst.placement_kind))
    if own:
        return inst.with_(limit=None)
    if layout.placement == "explicit":
        return inst.with_(limit=None, segments=layout.segments)
    v0, v, p = inst.chunks, layout.chunks, inst.devices
    if v % v0 and v0 % v:
        raise InstanceError(
            f"--chunks: cannot re-cut {v0} chunk(s) per device into {v}; use a multiple or a "
            f"divisor of {v0}"
        )
    data = inst.to_dict()
    data["name"] = f"{inst.name}[{layout.label}]"
    data["chunks"] = v
    data["segments"] = layout.segments
    refit_segment_lengths(data, layout.segments)
    if v != v0 and isinstance(data.get("segment_model", {}).get("layers"), list):
        data["segment_model"]["layers"] = _recut_layers(data["segment_model"]["layers"], v0, v)
    data["placement"] = layout.placement
    S = inst.model_stages  # one replica's stages: a second replica repeats them
    data["times"] = {k: _recut(getattr(inst, k)[:S], v0, v, p) for k in ("F", "I", "W")}
    data["memory"] = {
        "activation": _recut(inst.activation[:S], v0, v, p),
        "weight": _recut(inst.weight[:S], v0, v, p),
        "limit": None,
        # the resident weights: once left out, so every other layout held none
        **({"params": _recut(inst.params[:S], v0, v, p)} if any(inst.params) else {}),
        **({"unit": inst.memory_unit} if inst.memory_unit else {}),
    }
    data.update(_recut_per_stage(inst, v0, v, p))
    data.update(_recut_modes(inst, v0, v, p))
    return Instance.from_dict(data)


def _recut_per_stage(inst: Instance, v0: int, v: int, p: int) -> dict:
    """The other per-stage figures re-cut like the times: the replicas' gradient all-reduce
    and the step's optimizer and all-reduce times. A per-pair overlap table has no re-cut
    into another number of chunks."""
    S = inst.model_stages
    out: dict = {}
    if inst.replicas != 1:
        out["sync"] = _recut(inst.sync[:S], v0, v, p)
    if inst.step.given:
        step = inst.step
        out["step"] = {"mode": step.mode, "check": step.check,
                       **{k: _recut(tuple(getattr(step, k)[:S]) or (0.0,) * S, v0, v, p)
                          for k in ("optimizer", "allreduce")}}
    if v != v0 and inst.overlap is not None and not isinstance(inst.overlap, float):
        raise InstanceError("overlap.FB: a table per stage pair cannot be re-cut into another "
                            "number of chunks; give one factor for every pair")
    return out


def _recut_modes(inst: Instance, v0: int, v: int, p: int) -> dict:
    """The memory modes' per-stage fields re-cut like the times and activations they belong
    to (recompute time and what it keeps, copy times); the offloaded share stays a share."""
    out: dict = {}
    S = inst.model_stages
    rec, off = inst.recompute, inst.offload
    if rec is not None:
        fields = {"R": rec.R, "kept": rec.kept}
        if rec.selective:
            fields.update(R_selective=rec.R_selective, kept_selective=rec.kept_selective)
        out["recompute"] = {k: _recut(x[:S], v0, v, p) for k, x in fields.items()}
    if off is not None:
        if len(set(off.fraction)) > 1:
            raise InstanceError("offload.fraction: a per-stage share cannot be re-cut into "
                                "another number of chunks; give one share for every stage")
        out["offload"] = {"fraction": off.fraction[0], "streams": off.streams,
                          "d2h": _recut(off.d2h[:S], v0, v, p),
                          "h2d": _recut(off.h2d[:S], v0, v, p)}
    return out


def _recut_layers(layers: list[int], v0: int, v: int) -> list[int]:
    """Decoder layers per stage after re-cutting (the cost model needs whole layers)."""
    if v % v0 == 0:
        k = v // v0
        if any(n % k for n in layers):
            raise InstanceError(f"segment_model.layers: {layers} cannot be cut into {k} pieces "
                                "of whole layers; give segment_model.layers as one number")
        return [n // k for n in layers for _ in range(k)]
    k = v0 // v
    return [sum(layers[i * k:(i + 1) * k]) for i in range(len(layers) // k)]


def reference_peak(inst: Instance) -> float:
    """The 1F1B peak (largest over devices) of the model cut into one stage per device.

    Limits given as fractions are fractions of this one number, for every layout, so the memory
    axis means the same bytes whichever layout a point belongs to.
    """
    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate

    if inst.replicas > 1:
        raise InstanceError(
            "replicas: fractions of the 1F1B peak need one model replica (1F1B runs one); with "
            f"{inst.replicas} replicas give --absolute limits"
        )
    if inst.placement_kind != "explicit":
        base = relayout(inst, Layout(1, "loop"))
    else:
        base = inst if inst.segments == 1 else inst.with_(segments=1)
    if base.chunks != 1:
        raise InstanceError(
            "placement: fractions of the 1F1B peak need a one-chunk layout; this explicit "
            "placement has several stages per device, so give --absolute limits"
        )
    return max(simulate(base, generate("1f1b", base)).peak_memory)
