"""Starting the ranks: spawn them locally, or join the ones torchrun started.

Locally, ``run_jobs`` spawns one process per rank (torch.multiprocessing), each runs every job
of the list in one process group (start-up is paid once), rank 0 writes each report to a temp
file the parent reads back. If any rank raises, ``torch.multiprocessing`` terminates the others
and the parent raises :class:`RankFailed` with that rank's error: no hang. Under torchrun
(RANK and WORLD_SIZE in the environment) the process joins the group torchrun describes, so the
same command runs unchanged on several nodes; a failing rank makes torchrun stop the others.

Timeouts: the process group gets ``timeout_s`` (every collective and P2P is bounded), and every
P2P wait is bounded too (:mod:`zbsolve.runtime.p2p`).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import sys
import tempfile
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from zbsolve.runtime.runner import Job, RankContext, RunOptions, run_job


class RankFailed(RuntimeError):
    """A rank raised; the message starts with the rank and its error."""


def in_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _device_for(rank: int, opts: RunOptions) -> torch.device:
    if opts.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    local = int(os.environ.get("LOCAL_RANK", rank))
    # NCCL: one GPU per rank (checked by the CLI); gloo: ranks share the GPUs round-robin
    # (one GPU: every rank on cuda:0, payloads staged through the CPU)
    index = local % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _init(rank: int, world: int, opts: RunOptions) -> torch.device:
    if opts.backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: expected gloo or nccl, got {opts.backend!r}")
    if opts.backend == "nccl" and opts.device != "cuda":
        raise ValueError("backend nccl needs --device cuda (NCCL moves GPU tensors only)")
    torch.set_num_threads(opts.threads)
    device = _device_for(rank, opts)
    if device.type == "cuda":  # fp32 means fp32: the check is at rtol 1e-5
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    kwargs: dict[str, Any] = {}
    if opts.backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(opts.backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=opts.timeout_s), **kwargs)
    dist.barrier()  # first collective with every rank (NCCL: builds the communicator)
    return device


def run_rank(rank: int, world: int, jobs: list[Job], opts: RunOptions,
             teardown: bool = True) -> list[dict | None]:
    """Body of one rank (after the environment is set): all jobs in one process group.

    ``teardown=False`` (spawned ranks, which exit at once) skips ``destroy_process_group``
    after a successful run: see ``_spawned``."""
    device = _init(rank, world, opts)
    ok = False
    try:
        ctx = RankContext(rank, world, device, opts)
        reports = [run_job(ctx, job) for job in jobs]
        # Leave together: a rank tearing gloo down while rank 0 still computes the reference
        # can abort in gloo's destructor (seen as SIGABRT, "terminate called ...").
        dist.barrier()
        if os.environ.get("ZBSOLVE_RUN_DEBUG"):
            print(f"[rank {rank}] all jobs done, leaving the process group", flush=True)
        ok = True
        return reports
    finally:
        if teardown or not ok:
            dist.destroy_process_group()


def _spawned(rank: int, world: int, jobs: list[Job], opts: RunOptions, port: int,
             out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        reports = run_rank(rank, world, jobs, opts, teardown=False)
    except BaseException as exc:
        # the parent prints this (torch.multiprocessing shows only the traceback)
        Path(out_dir, f"error-{rank}.txt").write_text(
            f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise
    if rank == 0:
        Path(out_dir, "reports.json").write_text(json.dumps(reports))
    # Every rank has passed the last barrier and the reports are written: leave without
    # tearing gloo down. Its destructors still aborted a rank now and then after that barrier
    # ("terminate called without an active exception", exit 3: CI on 2026-12-03, after
    # 72c55d0 had made it rarer), which failed a run whose results were all in. The process
    # ends here, so the OS closes its sockets.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_jobs(jobs: list[Job], world: int, opts: RunOptions) -> list[dict[str, Any]]:
    """Run the jobs on ``world`` ranks; returns rank 0's reports (one per job).

    Under torchrun: this process is one rank; ranks other than 0 return []. Locally, the
    rendezvous port is picked free and may be taken by another job before rank 0 binds it: that
    one case is retried with a new port.
    """
    if in_torchrun():
        env_world = int(os.environ["WORLD_SIZE"])
        if env_world != world:
            raise RuntimeError(f"torchrun started {env_world} ranks but the table needs {world}")
        reports = run_rank(int(os.environ["RANK"]), env_world, jobs, opts)
        return [r for r in reports if r is not None]
    pickle.dumps((jobs, opts))  # fail here, not in a child, if something cannot travel
    for attempt in range(PORT_ATTEMPTS):
        try:
            return _spawn_once(jobs, world, opts)
        except _PortTaken:
            if attempt == PORT_ATTEMPTS - 1:
                raise RankFailed(f"rank 0 could not bind a rendezvous port in {PORT_ATTEMPTS} "
                                 "tries (another job took each free port first)") from None
    raise AssertionError("unreachable")


PORT_ATTEMPTS = 3


class _PortTaken(Exception):
    """The free port picked for the rendezvous was taken before rank 0 bound it."""


def _spawn_once(jobs: list[Job], world: int, opts: RunOptions) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="zbsolve-run-") as out_dir:
        try:
            mp.start_processes(_spawned, args=(world, jobs, opts, _free_port(), out_dir),
                               nprocs=world, join=True, start_method="spawn")
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            rank = getattr(exc, "error_index", None)
            first = _first_error(out_dir, rank, str(exc))
            errors = [_first_error(out_dir, r, "") for r in range(world)]
            if any("EADDRINUSE" in e or "address already in use" in e.lower() for e in errors):
                raise _PortTaken from None
            others = [f"rank {r}: {_first_error(out_dir, r, '')}" for r in range(world)
                      if r != rank and Path(out_dir, f"error-{r}.txt").exists()]
            more = f" (also {'; '.join(others)})" if others else ""
            raise RankFailed(f"rank {rank} failed: {first}{more}") from None
        return json.loads(Path(out_dir, "reports.json").read_text())


def _first_error(out_dir: str, rank: int | None, launcher_says: str) -> str:
    path = Path(out_dir, f"error-{rank}.txt")
    if path.exists():
        return path.read_text().splitlines()[0]
    return f"exited without a Python error (killed, or crashed in native code): {launcher_says}"
