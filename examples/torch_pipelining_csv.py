"""A zbsolve schedule run by PyTorch's own pipeline runtime, in a user's own training code.

    .venv/bin/python examples/torch_pipelining_csv.py      # 2 CPU ranks (gloo), ~10-20 s

The steps, as a user who already trains with ``torch.distributed.pipelining`` takes them:

1. solve a schedule for the pipeline (here 2 stages, 4 microbatches) and write it as a torch
   CSV: ``zbsolve.export.write(inst, schedule, "torch-csv", path)``, the same file as
   ``zbsolve export schedule.json --format torch-csv -o schedule.csv``. It lists compute
   actions only (``0F0``, ``1I0``, ``1W0``, ...); I and W are the split backward.
2. on every rank: wrap that rank's part of the model in a ``PipelineStage``, build a
   ``_PipelineScheduleRuntime`` and hand it the file with ``_load_csv``. torch infers which rank
   holds which stage and adds its own SEND/RECV to the compute actions.
3. ``schedule.step(...)`` runs one training step.

The script then checks the gradients against the same model run in one process, and prints
the largest relative difference. (``zbsolve run TABLE --engine torch`` does the same on the
runner's GPT model; this file shows it in plain torch code. ``_PipelineScheduleRuntime`` and
``_load_csv`` are torch's underscore names: torch may change them between releases.)
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import zbsolve

STAGES, MICROBATCHES, BATCH, WIDTH = 2, 4, 8, 16


def stage_module(s: int) -> nn.Module:
    torch.manual_seed(100 + s)  # the same weights on every rank and in the reference
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(BATCH, WIDTH, generator=gen), torch.randn(BATCH, WIDTH, generator=gen)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def write_schedule_csv(path: str) -> None:
    """Step 1: a schedule from zbsolve, exported as torch's compute-only CSV."""
    inst = zbsolve.load_instance({
        "name": "two-stages", "devices": STAGES, "microbatches": MICROBATCHES,
        "times": {"F": 1.0, "I": 1.0, "W": 1.0}, "comm": 0.1,
        "memory": {"activation": 1.0, "weight": 0.5, "limit": 2.0},
    })
    result = zbsolve.solve(inst, zbsolve.SolveOptions(time_limit=5, workers=1, seed=0))
    print(zbsolve.export.write(inst, result.schedule, "torch-csv", path).line(), flush=True)


def rank_main(rank: int, port: int, csv_path: str, out_path: str) -> None:
    """Step 2 and 3 on one rank: its stage, torch's runtime, our CSV, one step."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=STAGES)
    torch.set_num_threads(1)
    module = stage_module(rank)
    stage = PipelineStage(module, rank, STAGES, torch.device("cpu"))
    schedule = _PipelineScheduleRuntime([stage], n_microbatches=MICROBATCHES, loss_fn=loss_fn,
                                        scale_grads=True)
    schedule._load_csv(csv_path)  # torch reads our file and adds its SEND/RECV
    x, target = data()
    if rank == 0:
        schedule.step(x)
    else:
        losses: list[torch.Tensor] = []
        schedule.step(target=target, losses=losses)
    torch.save({n: p.grad for n, p in module.named_parameters()}, f"{out_path}.{rank}")
    dist.destroy_process_group()


def reference_grads() -> list[dict[str, torch.Tensor]]:
    """The same model and microbatches in one process: mean of the microbatch losses."""
    modules = [stage_module(s) for s in range(STAGES)]
    x, target = data()
    loss = sum(loss_fn(nn.Sequential(*modules)(xm), tm)
               for xm, tm in zip(x.chunk(MICROBATCHES), target.chunk(MICROBATCHES)))
    (loss / MICROBATCHES).backward()
    return [{n: p.grad for n, p in m.named_parameters()} for m in modules]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="zbsolve-torch-csv-") as tmp:
        csv_path, out_path = os.path.join(tmp, "schedule.csv"), os.path.join(tmp, "grads")
        write_schedule_csv(csv_path)
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.spawn(rank_main, args=(port, csv_path, out_path), nprocs=STAGES, join=True)
        worst = 0.0
        for s, ref in enumerate(reference_grads()):
            got = torch.load(f"{out_path}.{s}")
            for name, g in ref.items():
                worst = max(worst, float((got[name] - g).abs().max() / g.abs().max()))
    ok = worst <= 1e-5
    print(f"{'PASS' if ok else 'FAIL'}: gradients from torch's runtime running our CSV vs one "
          f"process: largest relative difference {worst:.3g} (limit 1e-5)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
