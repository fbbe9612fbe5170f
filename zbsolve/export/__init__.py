"""Exports of a schedule for runtimes and people.

- ``executor``: per-rank action lists with explicit SEND/RECV (our runtime's format,
  docs/executor-format.md), checked deadlock-free by ``p2p_check``.
- ``torch_csv``: torch.distributed.pipelining CSV (compute-only and with comms), strict reader.
- ``chrome_trace``: Chrome/Perfetto trace JSON.

Submodules are imported on demand; none of them imports torch.
"""
