"""``--engine torch``: the same schedule through PyTorch's own ``_PipelineScheduleRuntime``.

The table's compute order is written as the compute-only torch CSV by
``zbsolve.export.torch_csv.write_torch_csv``; torch reads it with ``_load_csv``, infers
stage -> rank from it, inserts its own SEND/RECV and runs it with its own I/W split
(``backward_one_chunk(full_backward=False)`` then ``backward_weight_one_chunk``) on our stage
modules (plain torch ops: no sink is active). Gradients are scaled by 1/m by torch
(``scale_grads=True``), which matches our mean-of-microbatch-losses definition.

This is also issue 4's loading test: our CSV in torch's runtime, gradients vs the reference.
Only the step time is measured here (torch's runtime has no per-action hook we could time
without changing what it runs). ``OVERLAP_F_B`` cells run through our custom function
(:class:`zbsolve.runtime.overlap.TorchOverlapFB`, registered with torch's
``register_custom_function``); torch without it would run the two halves in order.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from zbsolve.export.executor import ExecutorTable
from zbsolve.runtime.overlap import TorchOverlapFB
from zbsolve.runtime.workload import Workload


def write_csv_for(table: ExecutorTable, path: str) -> list[list[str]]:
    """The compute-only torch CSV of a table's compute order (validated by the simulator)."""
    from zbsolve.export.executor import instance_of, schedule_from_table
    from zbsolve.export.torch_csv import write_torch_csv

    return write_torch_csv(instance_of(table), schedule_from_table(table), path)


def run_torch(ctx, table: ExecutorTable, work: Workload, csv_path: str,
              overlap_function: bool = True) -> dict[str, Any]:
    """Run the CSV in torch's runtime; ``overlap_function=False`` leaves OVERLAP_F_B to torch's
    default (the two halves in order, the forward's SEND after the pair)."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    S, m = table.stages, table.microbatches
    mine = [s for s, r in enumerate(table.placement) if r == ctx.rank]
    modules = work.stages
    stages = [PipelineStage(modules[s].to(ctx.device), s, S, ctx.device) for s in mine]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=m, loss_fn=work.loss_fn,
                                        scale_grads=True)
    schedule._load_csv(csv_path)
    overlap = TorchOverlapFB()
    if overlap_function:  # OVERLAP_F_B cells: our custom function
        overlap.install(schedule)
    inferred = [schedule.stage_index_to_group_rank[s] for s in range(S)]
    if inferred != list(table.placement):
        raise RuntimeError(
            f"torch inferred placement {inferred} from the CSV, the table has {table.placement}"
        )
    params = {n: p for s in mine for n, p in work.names(modules[s]).items()}
    opt = ctx.opts.optimizer_spec.make(params.values())
    steps, cuda_peaks, timings = [], [], []
    for step in range(ctx.opts.steps):
        tokens, targets = work.batch(m, step)
        opt.zero_grad(set_to_none=True)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
            torch.cuda.reset_peak_memory_stats(ctx.device)
        dist.barrier()
        t0 = time.perf_counter()
        args = (tokens.to(ctx.device),) if 0 in mine else ()
        losses: list[torch.Tensor] = []
        kwargs: dict[str, Any] = {}
        if S - 1 in mine:
            kwargs = {"target": targets.to(ctx.device), "losses": losses}
        schedule.step(*args, **kwargs)
        overlap.finish()
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
            cuda_peaks.append(int(torch.cuda.max_memory_allocated(ctx.device)))
        step_ms = (time.perf_counter() - t0) * 1e3
        steps.append({
            "losses": {i: float(x.detach()) for i, x in enumerate(losses)},
            "grads": {0: {n: p.grad.detach().cpu().clone() for n, p in params.items()
                          if p.grad is not None}},
            "peak_bytes": 0,
            "step_ms": step_ms,
        })
        opt.step()
    final = {0: {n: p.detach().cpu().clone() for n, p in params.items()}}
    return {"steps": steps, "params": final, "timings": timings, "cuda_peaks": cuda_peaks,
            "overlap_f_b_ran": overlap.ran, "sent_early": overlap.sent_early}
