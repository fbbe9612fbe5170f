"""Ranks for the torchtitan test: torchtitan's own pipeline builder on our CSV and split (CPU, gloo).

Each rank builds the same small model with torchtitan's Llama 3 FQNs (``tok_embeddings``,
``layers.<i>`` in a ModuleDict, ``norm``, ``lm_head``; torchtitan's real Llama 3 needs triton,
which a CPU-only torch lacks), cuts it with torchtitan's ``_pipeline_module_split`` by our
``module_fqns_per_model_part`` and schedule name, builds the schedule with torchtitan's
``_build_pipeline_schedule`` from our ``ParallelismConfig`` keys (which loads our CSV), runs one
step and writes its stage indices, losses and gradients for the test to compare with the unsplit
model.
"""

from __future__ import annotations

import json
import os
import warnings
from datetime import timedelta

import torch
import torch.nn.functional as Fn
from torch import nn

VOCAB, DIM, SEQ = 64, 32, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(DIM)
        self.up = nn.Linear(DIM, 2 * DIM)
        self.down = nn.Linear(2 * DIM, DIM)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(Fn.silu(self.up(self.norm(h))))


class TinyLlama(nn.Module):
    """torchtitan's Llama 3 module names; forward tolerates the parts a stage lacks."""

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(n_layers)})
        self.norm = nn.RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.lm_head(h) if self.lm_head is not None else h


def build(n_layers: int, seed: int = 0) -> TinyLlama:
    torch.manual_seed(seed)
    return TinyLlama(n_layers)


def batch(m: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    data = torch.randint(0, VOCAB, (m, SEQ + 1), generator=gen)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def loss_pair(out: torch.Tensor, target: torch.Tensor):
    """torchtitan's loss functions return (loss, extra); its builder keeps the first."""
    return Fn.cross_entropy(out.reshape(-1, VOCAB), target.reshape(-1)), None


def rank_main(rank: int, world: int, port: int, cases: list[dict], out_dir: str) -> None:
    warnings.filterwarnings("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.config import ParallelismConfig
    from torchtitan.distributed.pipeline_parallel import (
        _build_pipeline_schedule,
        _pipeline_module_split,
    )

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
        results = []
        for case in cases:
            par = ParallelismConfig(**case["parallelism"])  # our keys, torchtitan's own class
            model = build(case["n_layers"])
            stages, parts = _pipeline_module_split(
                model, mesh, par.pipeline_parallel_schedule, torch.device("cpu"),
                par.module_fqns_per_model_part)
            schedule = _build_pipeline_schedule(
                parallelism=par, local_batch_size=case["local_batch_size"], stages=stages,
                loss_fn=loss_pair)
            tokens, targets = batch(case["local_batch_size"])
            losses: list[torch.Tensor] = []
            kwargs = {}
            if any(s.is_last for s in stages):
                kwargs = {"target": targets, "losses": losses}
            args = (tokens,) if any(s.is_first for s in stages) else ()
            schedule.step(*args, **kwargs)
            grads = {n: p.grad.tolist() for part in parts for n, p in part.named_parameters()
                     if p.grad is not None}
            results.append({"stages": [s.stage_index for s in stages],
                            "schedule_class": type(schedule).__name__,
                            "losses": [float(x) for x in losses], "grads": grads})
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump(results, fh)
        dist.barrier()
    finally:
        dist.destroy_process_group()
