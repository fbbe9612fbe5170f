"""The per-device memory budget on a GPU, and where the activation bytes come from.

On CPU there is no allocator to ask. The runner's :class:`~zbsolve.runtime.iw_split.StageRunner`
counts what autograd keeps during F (every tensor packed by
``torch.autograd.graph.saved_tensors_hooks``, each storage once, parameters excluded) and what
its deferred weight-gradient sink holds after I; the profiler reads those counts through the
runner's public ``MemoryTracker`` (the same figures the runner reports as its CPU peak memory)
rather than counting a second, different way. On CUDA the allocator deltas across F and I are
the truth and are used instead (see :mod:`zbsolve.profiler.core`).
"""

from __future__ import annotations

import torch


def gpu_free_bytes(device: torch.device) -> int:
    """Free memory of the GPU as the driver sees it (taken before the profile loads anything)."""
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def gpu_budget_bytes(free: int, resident_bytes: list[int]) -> list[float]:
    """Per pipeline device: ``free`` (this GPU, before profiling) minus what it keeps resident.

    The profiler sees one GPU; it assumes every pipeline device is the same kind of GPU with the
    same free memory, and subtracts per device the parameters, gradients and optimizer state of
    the stages placed there. A budget at or below zero is an error: the model does not fit.
    """
    out = []
    for d, resident in enumerate(resident_bytes):
        budget = float(free - resident)
        if budget <= 0:
            raise ValueError(
                f"device {d}: parameters, gradients and optimizer state ({resident} bytes) exceed "
                f"the free GPU memory ({free} bytes); use more devices or a smaller model"
            )
        out.append(budget)
    return out
