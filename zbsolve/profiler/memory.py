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

from collections.abc import Iterable

import torch


def param_state_bytes(params: Iterable[torch.Tensor], optimizer_states: int) -> int:
    """Bytes of parameters + their gradients + ``optimizer_states`` same-sized tensors each.

    ``optimizer_states``: 0 for the runner's plain SGD, 1 for SGD with momentum, 2 for Adam.
    """
    if optimizer_states < 0:
        raise ValueError(f"optimizer states: expected >= 0, got {optimizer_states}")
    n = sum(p.numel() * p.element_size() for p in params)
    return n * (2 + optimizer_states)


def gpu_budget_bytes(device: torch.device, resident_bytes: list[int]) -> list[float]:
    """Per pipeline device: free memory of this GPU now minus what that device keeps resident.

    The profiler sees one GPU; it assumes every pipeline device is the same kind of GPU with the
    same free memory, and subtracts per device the parameters, gradients and optimizer state of
    the stages placed there. A budget at or below zero is an error: the model does not fit.
    """
    free, _total = torch.cuda.mem_get_info(device)
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
