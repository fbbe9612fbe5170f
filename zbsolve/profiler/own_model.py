"""``zbsolve profile --hf ... | --module ...``: a layer profile and/or an instance for a split.

Orchestration only: the spec (:func:`zbsolve.runtime.models.spec_from_flags`), the per-layer
measurement (:func:`zbsolve.profiler.layers.profile_spec`), the hand-off latency of the boundary
tensor (:mod:`zbsolve.profiler.p2p`) and ``LayerProfile.to_instance`` for the split. The
instance's ``meta`` keeps the split, the layer names and the model spec, so ``zbsolve export
--format torchtitan`` needs no ``--split`` and ``zbsolve run`` can rebuild the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zbsolve.layers import GIB, LayerProfile


@dataclass(frozen=True)
class InstanceRequest:
    devices: int
    microbatches: int
    chunks: int = 1
    placement: str = "loop"
    split: list[int] | None = None  # None: the model's default split
    memory_limit: float | None = None  # bytes per device
    p2p_mode: str = "pingpong"
    name: str | None = None


def parse_split(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--split {text!r}: expected layer counts such as 3,2,2,3") from None


def instance_for_profile(profile: LayerProfile, req: InstanceRequest, *, threads: int = 1):
    """The instance of ``profile`` cut by the request's split, with the measured ``comm``."""
    from zbsolve.runtime.models import default_split

    stages = req.devices * req.chunks
    split = req.split or default_split(len(profile), stages)
    comm, p2p_info = 0.0, {"note": "one device: no hand-offs"}
    if req.devices > 1:
        from zbsolve.profiler.p2p import measure_p2p

        shape = tuple(profile.meta.get("boundary_shape") or ())
        if not shape:
            shape = (max(int(max(c.boundary for c in profile.layers) // 4), 1),)
        p2p = measure_p2p(shape, "float32", threads=threads, mode=req.p2p_mode)
        comm, p2p_info = p2p.one_way_ms.median, p2p.to_dict()
    limit = None if req.memory_limit is None else req.memory_limit / GIB
    extra = {"layer_names": [c.name for c in profile.layers], "p2p": p2p_info,
             "fallbacks": dict(profile.meta.get("fallbacks", {})),
             "model_spec": profile.meta.get("spec"), "units": {"time": "ms", "memory": "GiB"}}
    return profile.to_instance(split, devices=req.devices, microbatches=req.microbatches,
                               chunks=req.chunks, placement=req.placement, comm=comm,
                               limit_gib=limit, name=req.name, extra=extra)


def summary_rows(profile: LayerProfile) -> list[dict[str, Any]]:
    """One row per layer for the printed table: times, B and the I+W/B ratios, memory."""
    from zbsolve.profiler.layers import flop_ratios, iw_over_b

    time_ratio, flop = iw_over_b(profile), flop_ratios(profile)
    b = profile.meta.get("fused_B_ms", {})
    rows = []
    for c in profile.layers:
        rows.append({"layer": c.name, "F ms": c.F, "I ms": c.I, "W ms": c.W,
                     "B ms": b.get(c.name, float("nan")),
                     "(I+W)/B time": time_ratio.get(c.name, float("nan")),
                     "(I+W)/B FLOPs": flop.get(c.name, float("nan")),
                     "act MiB": c.activation / 2**20, "W-kept MiB": c.weight / 2**20,
                     "params MiB": c.params / 2**20,
                     "split": "fused: " + profile.meta["fallbacks"][c.name]
                     if c.name in profile.meta.get("fallbacks", {}) else "I/W"})
    return rows


def write_profile(profile: LayerProfile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    profile.dump(path)
    LayerProfile.load(path)  # read back: what we write loads
    return path
