"""P2P latency of the boundary tensor between two ranks: ping-pong, or a hand-off to a waiter.

The instance's ``comm`` is the delay of one stage-to-stage hand-off. Two processes of a
torch.distributed group (gloo on CPU; NCCL with one GPU each when two GPUs exist) pass the
boundary tensor (microbatch x seq x hidden activations), in one of two ways:

- ``pingpong`` (default): back and forth; one hand-off is half a round trip. Both ranks are
  busy in the exchange, so this is the wire-and-library latency.
- ``handoff``: the sender first computes for ``busy_ms`` (as a stage computes its F before it
  sends), while the receiver is already blocked in ``recv``, as in a pipeline run; the latency is
  from just before ``send`` to the return of ``recv``, both read from the host's monotonic clock
  (``time.perf_counter``), so both ranks must be on one host (the profiler spawns them locally).
  A blocked receiver has to be woken and scheduled again: on a shared, oversubscribed machine
  that costs milliseconds where the ping-pong measures tens of microseconds.

Each exchange is one sample: the median of ``repeats`` after ``warmup`` is written, the spread
travels in ``meta``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from zbsolve.profiler.timing import Spread, check_counts

MODES = ("pingpong", "handoff")
_METHOD = {
    "pingpong": "ping-pong between 2 ranks, one-way = round trip / 2",
    "handoff": "hand-off to a receiver blocked in recv while the sender computes; one-way = "
               "recv return - send start on the host's monotonic clock",
}


@dataclass(frozen=True)
class P2PResult:
    one_way_ms: Spread  # per sample
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    backend: str
    mode: str = "pingpong"

    def to_dict(self) -> dict:
        return {"one_way_ms": self.one_way_ms.to_dict(), "shape": list(self.shape),
                "dtype": self.dtype, "bytes": self.nbytes, "backend": self.backend,
                "mode": self.mode, "method": _METHOD[self.mode]}


def _busy(ms: float) -> None:
    """Compute (spin) for ``ms`` milliseconds, as a stage does before it sends."""
    import time

    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        pass


def _worker(rank: int, init_file: str, out_file: str, shape: tuple[int, ...], dtype: str,
            backend: str, warmup: int, repeats: int, threads: int, mode: str,
            busy_ms: float) -> None:
    import time

    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=120))
    try:
        device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(device)
        buf = torch.ones(shape, dtype=getattr(torch, dtype), device=device)
        peer = 1 - rank
        samples, stamps = [], []
        for _ in range(warmup + repeats):
            dist.barrier()
            if backend == "nccl":
                torch.cuda.synchronize(device)
            if mode == "handoff":
                if rank == 0:
                    _busy(busy_ms)
                    stamps.append(time.perf_counter())
                    dist.send(buf, peer)
                else:
                    dist.recv(buf, peer)
                    if backend == "nccl":
                        torch.cuda.synchronize(device)
                    stamps.append(time.perf_counter())
                continue
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)
            if backend == "nccl":
                torch.cuda.synchronize(device)
            samples.append((time.perf_counter() - t0) * 1e3 / 2)
        if mode == "handoff":  # the receiver's stamps minus the sender's, gathered on rank 0
            theirs = torch.zeros(len(stamps), dtype=torch.float64)
            mine = torch.tensor(stamps, dtype=torch.float64)
            if rank == 0:
                dist.recv(theirs, peer)
                samples = ((theirs - mine) * 1e3).tolist()
            else:
                dist.send(mine, peer)
        if rank == 0:
            from zbsolve.io import atomic_write_text

            atomic_write_text(out_file, json.dumps(samples[warmup:]))
    finally:
        dist.destroy_process_group()


def measure_p2p(shape: tuple[int, ...], dtype: str = "float32", *, backend: str | None = None,
                warmup: int = 5, repeats: int = 30, threads: int = 1, mode: str = "pingpong",
                busy_ms: float = 1.0) -> P2PResult:
    """One-way hand-off latency of a tensor of ``shape`` between two fresh local ranks."""
    import torch
    import torch.multiprocessing as mp

    check_counts(repeats, warmup)
    if mode not in MODES:
        raise ValueError(f"--p2p: expected one of {MODES}, got {mode!r}")
    if not busy_ms >= 0:
        raise ValueError(f"busy_ms: expected >= 0, got {busy_ms!r}")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"p2p backend: expected gloo or nccl, got {backend!r}")
    with tempfile.TemporaryDirectory(prefix="zbsolve-p2p-") as tmp:
        init_file = os.path.join(tmp, "store")
        out_file = os.path.join(tmp, "samples.json")
        mp.start_processes(_worker, args=(init_file, out_file, tuple(shape), dtype, backend, warmup,
                                          repeats, threads, mode, busy_ms),
                           nprocs=2, join=True, start_method="spawn")
        samples = json.loads(Path(out_file).read_text())
    nbytes = int(torch.tensor([], dtype=getattr(torch, dtype)).element_size())
    for n in shape:
        nbytes *= int(n)
    return P2PResult(Spread.of(samples), tuple(shape), dtype, nbytes, backend, mode)
