"""The profiler: from a torch model to a zbsolve instance.

``zbsolve profile`` measures, on the runner's own stages and I/W split, per logical stage the F,
I and W times (median after warm-up, with the spread), the activation bytes F keeps and the part
kept until W, the P2P latency of the boundary tensor and the per-device memory budget, and writes
the foundation instance schema with the analytic estimate beside it (``meta``).

Importing this package does not import torch; :func:`zbsolve.profiler.api.profile` does.
"""

from __future__ import annotations

__all__ = ["profile"]


def profile(*args, **kwargs):
    """See :func:`zbsolve.profiler.api.profile` (imported lazily: it needs torch)."""
    from zbsolve.profiler.api import profile as _profile

    return _profile(*args, **kwargs)
