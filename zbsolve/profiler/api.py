"""``profile(...)``: one call from a model description to a :class:`ProfileRun`.

Orchestration only: the stage measurements are :mod:`zbsolve.profiler.core`, the hand-off
latency :mod:`zbsolve.profiler.p2p`, the file :mod:`zbsolve.profiler.writer`.
"""

from __future__ import annotations

from zbsolve.instance import placement_for
from zbsolve.profiler.records import StageProfile
from zbsolve.profiler.timing import Spread, check_counts
from zbsolve.profiler.writer import ProfileRun


def _budget(device, free: int | None, stages: list[StageProfile], placement: tuple[int, ...],
            devices: int, memory_limit: float | None,
            optimizer_states: int) -> tuple[list[float] | None, str]:
    """Per-device activation budget in bytes, and where it came from."""
    if memory_limit is not None:
        return [float(memory_limit)] * devices, "--memory-limit"
    if device.type != "cuda" or free is None:
        return None, "CPU: no allocator budget; pass --memory-limit to set one"
    from zbsolve.profiler.memory import gpu_budget_bytes

    if optimizer_states < 0:
        raise ValueError(f"--optimizer-states: expected >= 0, got {optimizer_states}")
    resident = [0] * devices
    for st in stages:
        resident[placement[st.stage]] += st.param_bytes * (2 + optimizer_states)
    return gpu_budget_bytes(free, resident), (
        f"GPU free memory minus parameters, gradients and {optimizer_states} optimizer state(s) "
        "per parameter of the device's stages"
    )


def profile(cfg, *, devices: int, chunks: int, microbatches: int, placement: str = "loop",
            repeats: int = 10, warmup: int = 3, memory_limit: float | None = None,
            threads: int = 1, device: str = "cpu", optimizer_states: int = 0,
            interval: float = 0.0, clock: str = "wall", p2p_mode: str = "pingpong",
            p2p_repeats: int = 30, p2p=None, name: str | None = None,
            command: str = "", segments: int = 1,
            segment_lengths: str | list[int] = "equal",
            modes: tuple[str, ...] = ()) -> ProfileRun:
    """Profile ``cfg`` (a :class:`zbsolve.runtime.model.GPTConfig`) as S = devices x chunks stages.

    ``threads`` is torch's intra-op thread count for the measurements; the runner uses one per
    rank on CPU (``RunOptions.threads``), so 1 is the default here too. ``memory_limit`` is in
    bytes per device (None: CPU unlimited, GPU measured). ``optimizer_states`` counts the
    optimizer tensors per parameter kept on the device (the runner's SGD: 0; Adam: 2). ``p2p``:
    a :class:`~zbsolve.profiler.p2p.P2PResult` to reuse (the boundary tensor does not depend on
    the layout, so ``zbsolve loop`` measures it once for all layouts). ``interval``: seconds
    slept between sample rounds (see :func:`zbsolve.profiler.core.profile_model`); ``clock``:
    ``wall`` or ``cpu`` (thread CPU time, see :class:`zbsolve.profiler.timing.Stopwatch`);
    ``p2p_mode``: ``pingpong`` or ``handoff`` (see :mod:`zbsolve.profiler.p2p`).
    ``segments`` > 1 also measures each sequence segment's F, I, W and memory
    (:mod:`zbsolve.profiler.segments`) with ``segment_lengths`` (equal, balanced for the
    runner's model, or token counts); the instance then holds per-segment tables.
    ``modes`` (``recompute``, ``offload``) also measures those memory modes
    (:mod:`zbsolve.profiler.modes`) and writes their instance fields.
    """
    import torch

    from zbsolve.profiler.core import profile_model
    from zbsolve.profiler.modes import check_modes
    from zbsolve.profiler.p2p import measure_p2p

    check_counts(repeats, warmup)
    modes = check_modes(tuple(modes))
    for field, value in (("devices", devices), ("chunks", chunks), ("microbatches", microbatches),
                         ("threads", threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field}: expected an integer >= 1, got {value!r} (--{field})")
    stage_map = placement_for(placement, devices, chunks)
    dev = torch.device(device)
    if p2p is not None and tuple(p2p.shape) != (cfg.microbatch_size, cfg.seq, cfg.hidden):
        raise ValueError(f"p2p: measured for shape {p2p.shape}, the model's boundary tensor is "
                         f"{(cfg.microbatch_size, cfg.seq, cfg.hidden)}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible; use --device cpu")
    free = None
    if dev.type == "cuda":
        from zbsolve.profiler.memory import gpu_free_bytes

        free = gpu_free_bytes(dev)  # before the stages are loaded
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        stages = profile_model(cfg, devices * chunks, microbatches, warmup=warmup,
                               repeats=repeats, device=dev, interval=interval, clock=clock,
                               modes=modes)
        seg_profiles = _segments(cfg, devices * chunks, microbatches, segments, segment_lengths,
                                 warmup, repeats, dev, clock)
    finally:
        torch.set_num_threads(previous_threads)
    shape = (cfg.microbatch_size, cfg.seq, cfg.hidden)
    if devices > 1:
        p2p = p2p or measure_p2p(shape, "float32", warmup=5, repeats=p2p_repeats, threads=threads,
                                 mode=p2p_mode)
        comm, p2p_info = p2p.one_way_ms, p2p.to_dict()
    else:
        comm, p2p_info = Spread.of([0.0]), {"note": "one device: no hand-offs"}
    limit, limit_source = _budget(dev, free, stages, stage_map, devices, memory_limit,
                                  optimizer_states)
    label = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return ProfileRun(
        name=name or f"gpt-l{cfg.layers}-h{cfg.hidden}-p{devices}-v{chunks}-m{microbatches}",
        model=cfg.to_dict(), devices=devices, microbatches=microbatches, chunks=chunks,
        placement=placement, stages=stages, comm=comm, p2p=p2p_info, limit_bytes=limit,
        limit_source=limit_source, device=label, threads=threads, warmup=warmup,
        repeats=repeats, torch_version=str(torch.__version__), command=command, clock=clock,
        segments=seg_profiles, modes=modes,
    )


def _segments(cfg, n_stages: int, microbatches: int, k: int, rule, warmup: int, repeats: int,
              device, clock: str) -> tuple:
    """Per-segment profiles (none for one segment)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"segments: expected an integer >= 1, got {k!r} (--segments)")
    if k == 1:
        return ()
    from zbsolve.profiler.segments import profile_segments, runner_shape
    from zbsolve.segments import SegmentError, resolve_lengths

    try:
        lengths = resolve_lengths(rule, k, runner_shape(cfg, n_stages), "--segment-lengths")
    except SegmentError as exc:
        raise ValueError(str(exc)) from None
    return tuple(profile_segments(cfg, n_stages, microbatches, tuple(int(x) for x in lengths),
                                  warmup=warmup, repeats=repeats, device=device, clock=clock))
