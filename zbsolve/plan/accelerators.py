"""The accelerators a plan can be made for: vendor datasheet figures and one efficiency factor.

Datasheet figures (dense, i.e. without the 2:4 sparsity that doubles the headline numbers):

- **A100 SXM4 80GB** (NVIDIA A100 Tensor Core GPU datasheet): BF16 tensor core 312 TFLOPS
  (624 with sparsity); 80 GB HBM2e at 2,039 GB/s; NVLink (3rd gen.) 600 GB/s, counted over both
  directions, so 300 GB/s each way; a DGX A100 has one ConnectX-6 HDR InfiniBand port of
  200 Gb/s (25 GB/s) per GPU (DGX A100 datasheet).
- **H100 SXM5 80GB** (NVIDIA H100 Tensor Core GPU datasheet): BF16 tensor core 1,979 TFLOPS with
  sparsity, 989 dense; 80 GB HBM3 at 3.35 TB/s; NVLink (4th gen.) 900 GB/s (450 GB/s each way);
  a DGX H100 has one ConnectX-7 NDR port of 400 Gb/s (50 GB/s) per GPU (DGX H100 datasheet).
- **H200 SXM 141GB** (NVIDIA H200 Tensor Core GPU datasheet): the H100's compute (989 TFLOPS
  dense BF16) with 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s; 400 Gb/s NDR per GPU.

Latency is not on any datasheet. The values here are assumptions of the order NCCL's send/recv
of a small message takes (about 10 us inside a node, 20 us across InfiniBand); they only matter
for tiny boundary tensors.

**One efficiency factor per accelerator** scales both roofs (FLOPS and bytes/s) of every kernel
(``zbsolve.plan.kernels``): a kernel takes max(flops / (eta * peak), bytes / (eta * bandwidth)).
It is not fitted per model, per row or per kind of time.

- A100: eta = 0.73, the one value that makes the geometric mean of predicted / measured equal to
  1 over all 36 published per-stage times (T_F, T_B, T_W of the 12 rows) of the Zero Bubble
  paper's table (``zbsolve.plan.validate``). With one parameter for 36 numbers the fit cannot
  absorb the differences between models or between F, I and W; the error table shows them.
- H100 and H200: eta = 0.65, an assumption, not validated (no published per-stage times at hand):
  lower than the A100's because achieved tensor-core throughput grows less than the peak (a
  3.2x higher peak on 1.6x the memory bandwidth). ``zbsolve plan --efficiency`` overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """A point-to-point path between two pipeline ranks."""

    name: str
    bandwidth: float  # bytes/s, one direction
    latency: float  # seconds (assumed, see the module docstring)

    def transfer_ms(self, nbytes: float, efficiency: float) -> float:
        """Milliseconds to hand ``nbytes`` to the next rank."""
        return 1e3 * (self.latency + nbytes / (efficiency * self.bandwidth))


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float  # dense BF16 tensor-core FLOP/s
    hbm_bandwidth: float  # bytes/s
    memory_gb: float  # datasheet capacity, 10^9 bytes
    intra_node: Link  # NVLink
    inter_node: Link  # InfiniBand, per GPU
    gpus_per_node: int
    efficiency: float  # achievable fraction of both roofs (one per accelerator)
    efficiency_note: str

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    def kernel_seconds(self, flops: float, nbytes: float, efficiency: float | None = None
                       ) -> float:
        """Roofline time of one kernel: the larger of its compute and its memory traffic."""
        eta = self.efficiency if efficiency is None else efficiency
        return max(flops / (eta * self.peak_flops), nbytes / (eta * self.hbm_bandwidth))

    def hop_link(self, devices: int) -> Link:
        """The slowest hop of a pipeline over ``devices`` ranks placed node by node."""
        return self.intra_node if devices <= self.gpus_per_node else self.inter_node


def _nvlink(gb_per_s_total: float) -> Link:
    return Link("NVLink", gb_per_s_total / 2 * 1e9, 10e-6)


def _infiniband(gbit_per_s: float) -> Link:
    return Link("InfiniBand", gbit_per_s / 8 * 1e9, 20e-6)


ACCELERATORS: dict[str, Accelerator] = {
    "a100": Accelerator("A100 SXM4 80GB", 312e12, 2039e9, 80, _nvlink(600), _infiniband(200), 8,
                        0.73, "fitted to the Zero Bubble paper's 36 measured A100 times"),
    "h100": Accelerator("H100 SXM5 80GB", 989e12, 3350e9, 80, _nvlink(900), _infiniband(400), 8,
                        0.65, "assumed, not validated"),
    "h200": Accelerator("H200 SXM 141GB", 989e12, 4800e9, 141, _nvlink(900), _infiniband(400), 8,
                        0.65, "assumed, not validated"),
}


def accelerator(name: str) -> Accelerator:
    """The accelerator by its short name (``a100``, ``h100``, ``h200``)."""
    key = name.lower()
    if key not in ACCELERATORS:
        raise ValueError(f"--gpu: unknown accelerator {name!r}; known: {', '.join(ACCELERATORS)}")
    return ACCELERATORS[key]
