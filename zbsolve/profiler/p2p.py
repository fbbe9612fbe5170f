"""P2P latency of the boundary tensor: ping-pong between two ranks.

The instance's ``comm`` is the delay of one stage-to-stage hand-off. The profiler measures it the
way the runner pays it: two processes of a torch.distributed group (gloo on CPU; NCCL with one
GPU each when two GPUs exist) send the boundary tensor (microbatch x seq x hidden activations)
back and forth; one hand-off is half a round trip. Each round trip is one sample: the median of
``repeats`` after ``warmup`` is written, the spread travels in ``meta``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from zbsolve.profiler.timing import Spread, check_counts


@dataclass(frozen=True)
class P2PResult:
    one_way_ms: Spread  # half a round trip, per sample
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    backend: str

    def to_dict(self) -> dict:
        return {"one_way_ms": self.one_way_ms.to_dict(), "shape": list(self.shape),
                "dtype": self.dtype, "bytes": self.nbytes, "backend": self.backend,
                "method": "ping-pong between 2 ranks, one-way = round trip / 2"}


def _worker(rank: int, init_file: str, out_file: str, shape: tuple[int, ...], dtype: str,
            backend: str, warmup: int, repeats: int, threads: int) -> None:
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
        samples = []
        for i in range(warmup + repeats):
            dist.barrier()
            if backend == "nccl":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)
            if backend == "nccl":
                torch.cuda.synchronize(device)
            if i >= warmup:
                samples.append((time.perf_counter() - t0) * 1e3 / 2)
        if rank == 0:
            Path(out_file).write_text(json.dumps(samples))
    finally:
        dist.destroy_process_group()


def measure_p2p(shape: tuple[int, ...], dtype: str = "float32", *, backend: str | None = None,
                warmup: int = 5, repeats: int = 30, threads: int = 1) -> P2PResult:
    """One-way hand-off latency of a tensor of ``shape`` between two fresh ranks."""
    import torch
    import torch.multiprocessing as mp

    check_counts(repeats, warmup)
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"p2p backend: expected gloo or nccl, got {backend!r}")
    with tempfile.TemporaryDirectory(prefix="zbsolve-p2p-") as tmp:
        init_file = os.path.join(tmp, "store")
        out_file = os.path.join(tmp, "samples.json")
        mp.start_processes(_worker, args=(init_file, out_file, tuple(shape), dtype, backend, warmup,
                                          repeats, threads),
                           nprocs=2, join=True, start_method="spawn")
        samples = json.loads(Path(out_file).read_text())
    nbytes = int(torch.tensor([], dtype=getattr(torch, dtype)).element_size())
    for n in shape:
        nbytes *= int(n)
    return P2PResult(Spread.of(samples), tuple(shape), dtype, nbytes, backend)
