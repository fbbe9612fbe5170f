"""The analytic cost model against the times the Zero Bubble paper measured on A100s.

The ICLR table (``zbsolve/data/reference/zb_iclr_bubble_rates.csv``) lists, for 12 settings of
four GPT models, the per-stage T_F, T_B (our I) and T_W the authors' profiler measured on A100
SXM 80GB GPUs. The shapes (the authors' ``megatron/core/pipeline_parallel/efficiency.py``,
``arxiv`` branch): 24, 32, 48, 64 layers; h = 2304, 4096, 5120, 6144; a = 24, 32, 40, 48; on
p = 8, 8, 16, 32 stages, so L/p = 3, 4, 3, 2 blocks per stage; s = 1024; fp16 with dropout
and Megatron's materialised softmax (the 34h + 5as memory count they schedule with).

**Microbatch size: 6, 3, 1, 1** sequences for 1.5B, 6.2B, 14.6B, 28.3B. The repository does not
state it: ``efficiency.py`` lists only p, m, the times and h, a, L, and its
``examples/pretrain_zero_bubble.sh`` runs a different, 4p-2-layer model with
``--micro-batch-size 1``. The values are the paper's settings table as we recall it (its text
could not be retrieved where this was written), and the published numbers pin them down:
W is nothing but the weight-gradient matmuls, and with b = 6, 3, 1, 1 they run at 80, 81, 76 and
77 % of the A100's 312 TFLOPS in every row (with b = 1 the 1.5B model's would run at 13 %), and
the two 8-GPU settings then move their boundary tensors (b x s x h x 2 bytes: 28.3 and 25.2 MB)
at the same 47 GB/s (T_comm 0.60 and 0.53 ms).

The times are of a stage of transformer blocks only (uniform over stages, so not the stages with
the embedding or the head), so the model is compared on L/p blocks. The measured times vary a
little with m (profiling noise); the model does not depend on m, so each model's error is the
mean over its three rows.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from zbsolve.data import reference_path
from zbsolve.plan import kernels
from zbsolve.plan.accelerators import ACCELERATORS, Accelerator
from zbsolve.plan.cost_model import pass_times_ms
from zbsolve.plan.shapes import ModelShape, family

REFERENCE = reference_path("zb_iclr_bubble_rates.csv")
KINDS = (("T_F", "F"), ("T_B", "I"), ("T_W", "W"))


@dataclass(frozen=True)
class ZBModel:
    name: str
    layers: int
    hidden: int
    heads: int
    stages: int
    microbatch_size: int

    def shape(self) -> ModelShape:
        # the vocabulary does not enter a stage of blocks; GPT-2's is given for completeness
        return family("gpt", layers=self.layers, hidden=self.hidden, heads=self.heads,
                      seq=1024, vocab=50257, label=f"zb-gpt-{self.name}")

    @property
    def blocks_per_stage(self) -> int:
        return self.layers // self.stages


ZB_MODELS = {m.name: m for m in (
    ZBModel("1.5B", 24, 2304, 24, 8, 6), ZBModel("6.2B", 32, 4096, 32, 8, 3),
    ZBModel("14.6B", 48, 5120, 40, 16, 1), ZBModel("28.3B", 64, 6144, 48, 32, 1),
)}


@dataclass(frozen=True)
class Comparison:
    model: str
    microbatches: int
    kind: str  # T_F | T_B | T_W | T_comm
    measured: float  # ms
    predicted: float  # ms

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured


def read_reference(path: Path = REFERENCE) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the reference table: {exc}") from None


def stage_times_ms(model: ZBModel, accel: Accelerator, efficiency: float | None = None
                   ) -> dict[str, float]:
    """Predicted F, I, W (ms) of one stage of ``model.blocks_per_stage`` blocks."""
    shape = model.shape()
    t = float(model.microbatch_size * shape.seq)
    one = pass_times_ms(kernels.decoder_block(shape, t), accel, efficiency)
    return {k: model.blocks_per_stage * v for k, v in one.items()}


def comm_ms(model: ZBModel, accel: Accelerator, efficiency: float | None = None) -> float:
    """Predicted hand-off of the boundary tensor over the pipeline's slowest link."""
    shape = model.shape()
    nbytes = shape.dtype_bytes * model.microbatch_size * shape.seq * shape.hidden
    eta = accel.efficiency if efficiency is None else efficiency
    return accel.hop_link(model.stages).transfer_ms(nbytes, eta)


def compare(efficiency: float | None = None, accel: Accelerator | None = None,
            with_comm: bool = False) -> list[Comparison]:
    """Every published time next to the model's prediction."""
    accel = accel or ACCELERATORS["a100"]
    out = []
    for row in read_reference():
        model = ZB_MODELS[row["model"]]
        pred = stage_times_ms(model, accel, efficiency)
        for column, kind in KINDS:
            out.append(Comparison(model.name, int(row["m"]), column, float(row[column]),
                                  pred[kind]))
        if with_comm:
            out.append(Comparison(model.name, int(row["m"]), "T_comm", float(row["T_comm"]),
                                  comm_ms(model, accel, efficiency)))
    return out


def fitted_efficiency(accel: Accelerator | None = None) -> float:
    """The one factor that makes the geometric mean of predicted / measured 1 over all 36
    compute times (every time is exactly proportional to 1 / efficiency)."""
    accel = accel or ACCELERATORS["a100"]
    rows = compare(1.0, accel)
    log_ratio = sum(math.log(r.predicted / r.measured) for r in rows) / len(rows)
    return math.exp(log_ratio)


def error_table(efficiency: float | None = None, with_comm: bool = True) -> list[dict]:
    """Per model and time kind: measured (mean of the rows), predicted, relative error."""
    rows = compare(efficiency, with_comm=with_comm)
    out = []
    for name in ZB_MODELS:
        for kind in ("T_F", "T_B", "T_W", "T_comm"):
            sel = [r for r in rows if r.model == name and r.kind == kind]
            if not sel:
                continue
            measured = sum(r.measured for r in sel) / len(sel)
            out.append({"model": name, "kind": kind, "measured_ms": measured,
                        "predicted_ms": sel[0].predicted,
                        "error": (sel[0].predicted - measured) / measured,
                        "worst_row_error": max((r.error for r in sel), key=abs)})
    return out


def summary(table: list[dict]) -> dict[str, float]:
    """Mean absolute error per time kind and over the compute times."""
    out = {}
    for kind in ("T_F", "T_B", "T_W", "T_comm"):
        sel = [abs(r["error"]) for r in table if r["kind"] == kind]
        if sel:
            out[f"mean_abs_error_{kind}"] = sum(sel) / len(sel)
    compute = [abs(r["error"]) for r in table if r["kind"] != "T_comm"]
    out["mean_abs_error_compute"] = sum(compute) / len(compute)
    out["max_abs_error_compute"] = max(compute)
    return out
