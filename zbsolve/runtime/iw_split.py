"""The backward split into I (input gradient) and W (weight gradients), without running twice.

Every parameterised op of the model (linear, layer-norm affine, embedding, positional add) is a
custom autograd function when a :class:`WeightGradSink` is active at forward time. Its backward
computes only the gradient of its input and hands the sink a closure holding exactly what the
weight gradient needs (for a linear: its input and its output gradient). So:

- I = one pass of the autograd engine over the stage graph: input gradients only; the graph
  (all other saved activations) is freed when it ends, as the memory model says;
- W = running the sink's closures: the weight-gradient matmuls, accumulated into ``.grad``;
- B = I then W.

No sink active means plain torch ops, which is what the single-process reference and torch's own
pipelining runtime (``--engine torch``) run.

:class:`StageRunner` wraps one stage module with ``forward / backward_input / backward_weight /
backward`` per microbatch; the runner and the profiler both drive stages through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as Fn
from torch import nn

from zbsolve.runtime.graph_split import SavedTensorCensus
from zbsolve.runtime.stage_modes import StageModes

LN_EPS = 1e-5
_ACTIVE: list[WeightGradSink] = []  # stack; read at forward time only (backward may run on
# the autograd engine's device thread, so closures carry their sink instead of reading this)


class WeightGradSink:
    """Deferred weight-gradient work of one (stage, microbatch)."""

    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []
        self.nbytes = 0  # bytes held for W (inputs and output gradients), for memory tracking

    def add(self, task: Callable[[], None], *held: torch.Tensor) -> None:
        self.tasks.append(task)
        self.nbytes += sum(t.numel() * t.element_size() for t in held)

    def run(self) -> None:
        tasks, self.tasks = self.tasks, []
        with torch.no_grad():  # W builds no graph: it is the end of the line
            for task in tasks:
                task()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.tasks)


@contextmanager
def deferring(sink: WeightGradSink) -> Iterator[WeightGradSink]:
    """Ops run inside record their weight-gradient work into ``sink`` instead of doing it."""
    _ACTIVE.append(sink)
    try:
        yield sink
    finally:
        _ACTIVE.pop()


def _sink() -> WeightGradSink | None:
    return _ACTIVE[-1] if _ACTIVE else None


def accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    """Add into ``param.grad`` as autograd's AccumulateGrad does (first one is stored)."""
    if param.grad is None:
        param.grad = grad.detach().clone(memory_format=torch.contiguous_format)
    else:
        param.grad.add_(grad)


# ---------------------------------------------------------------------- custom functions
class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, sink):
        ctx.save_for_backward(x, weight)
        # the parameter objects themselves (leaves: no reference cycle), for the deferred .grad
        ctx.sink, ctx.weight_param, ctx.bias_param = sink, weight, bias
        return Fn.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        x = x.detach()  # W needs the values only, not the (freed) graph behind them
        bias_param = ctx.bias_param
        grad_x = grad.matmul(weight) if ctx.needs_input_grad[0] else None
        weight_param = ctx.weight_param

        def weight_grads() -> None:
            g2 = grad.reshape(-1, grad.shape[-1])
            accumulate(weight_param, g2.t().matmul(x.reshape(-1, x.shape[-1])))
            if bias_param is not None:
                accumulate(bias_param, g2.sum(0))

        ctx.sink.add(weight_grads, x, grad)
        return grad_x, None, None, None


class _ScaleShiftFn(torch.autograd.Function):
    """y = xhat * weight + bias: the affine half of a layer norm."""

    @staticmethod
    def forward(ctx, xhat, weight, bias, sink):
        ctx.save_for_backward(xhat, weight)
        ctx.sink, ctx.weight_param, ctx.bias_param = sink, weight, bias
        return torch.addcmul(bias, xhat, weight)

    @staticmethod
    def backward(ctx, grad):
        xhat, weight = ctx.saved_tensors
        xhat = xhat.detach()
        weight_param, bias_param = ctx.weight_param, ctx.bias_param

        def weight_grads() -> None:
            h = grad.shape[-1]
            accumulate(weight_param, (grad * xhat).reshape(-1, h).sum(0))
            accumulate(bias_param, grad.reshape(-1, h).sum(0))

        ctx.sink.add(weight_grads, xhat, grad)
        return grad * weight, None, None, None


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tokens, weight, sink):
        ctx.tokens, ctx.sink, ctx.weight_param = tokens, sink, weight
        return Fn.embedding(tokens, weight)

    @staticmethod
    def backward(ctx, grad):
        tokens, weight_param = ctx.tokens, ctx.weight_param

        def weight_grads() -> None:
            g = torch.zeros_like(weight_param)
            g.index_add_(0, tokens.reshape(-1), grad.reshape(-1, grad.shape[-1]))
            accumulate(weight_param, g)

        ctx.sink.add(weight_grads, tokens, grad)
        return None, None, None


class _AddPositionFn(torch.autograd.Function):
    """y = x + pos[offset : offset + T] (broadcast over the batch)."""

    @staticmethod
    def forward(ctx, x, pos, offset, sink):
        ctx.sink, ctx.pos_param, ctx.offset = sink, pos, offset
        return x + pos[offset: offset + x.shape[1]]

    @staticmethod
    def backward(ctx, grad):
        pos_param, offset = ctx.pos_param, ctx.offset

        def weight_grads() -> None:
            g = torch.zeros_like(pos_param)
            g[offset: offset + grad.shape[1]] = grad.sum(0)
            accumulate(pos_param, g)

        ctx.sink.add(weight_grads, grad)
        return grad if ctx.needs_input_grad[0] else None, None, None, None


# ---------------------------------------------------------------------- ops used by the model
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    sink = _sink()
    if sink is None:
        return Fn.linear(x, weight, bias)
    return _LinearFn.apply(x, weight, bias, sink)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    shape = (x.shape[-1],)
    sink = _sink()
    if sink is None:
        return Fn.layer_norm(x, shape, weight, bias, LN_EPS)
    xhat = Fn.layer_norm(x, shape, None, None, LN_EPS)
    return _ScaleShiftFn.apply(xhat, weight, bias, sink)


def embedding(tokens: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    sink = _sink()
    if sink is None:
        return Fn.embedding(tokens, weight)
    return _EmbeddingFn.apply(tokens, weight, sink)


def add_position(x: torch.Tensor, pos: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """x plus the positional embeddings of positions offset .. offset + T - 1."""
    sink = _sink()
    if sink is None:
        return x + pos[offset: offset + x.shape[1]]
    return _AddPositionFn.apply(x, pos, offset, sink)


# ---------------------------------------------------------------------- memory accounting
@dataclass
class MemoryTracker:
    """Bytes of activations a rank holds (saved for backward, then kept for W), and the peak.

    The CPU stand-in for ``torch.cuda.max_memory_allocated``: it counts what the schedule is
    responsible for, each storage once, parameters excluded.
    """

    current: int = 0
    peak: int = 0

    def add(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def sub(self, nbytes: int) -> None:
        self.current -= nbytes

    def reset_peak(self) -> None:
        self.peak = self.current


@contextmanager
def _count_saved(param_ptrs: set[int], seen: dict[int, int]) -> Iterator[None]:
    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in param_ptrs and ptr not in seen:
            seen[ptr] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield


# ---------------------------------------------------------------------- the stage runner
@dataclass
class _Pending:
    x: torch.Tensor | None  # stage input (a leaf that receives the input gradient)
    root: torch.Tensor | None  # output (or scaled loss on the last stage) the backward starts at
    sink: WeightGradSink
    census: SavedTensorCensus  # the forward's saved tensors (what offload moves)
    saved_bytes: int
    held_bytes: int = 0
    done_input: bool = False


@dataclass
class StageRunner(StageModes):
    """One stage's F, I, W and B per microbatch (and the memory modes' R, O, L:
    :class:`~zbsolve.runtime.stage_modes.StageModes`).

    ``loss_fn`` and ``loss_scale`` apply on the last stage only: the microbatch loss is scaled
    (1/m) so that summed gradients are those of the mean loss, as torch's runtime does.
    """

    module: nn.Module
    index: int
    n_stages: int
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    loss_scale: float = 1.0
    memory: MemoryTracker = field(default_factory=MemoryTracker)
    pending: dict[int, _Pending] = field(default_factory=dict)
    losses: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in self.module.parameters()}
        self._init_modes()

    def forward(self, mb: int, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """F: run the stage, keep what backward needs; returns the (detached) output to hand on,
        or the unscaled loss on the last stage."""
        if mb in self.pending:
            raise RuntimeError(f"stage {self.index}: forward of microbatch {mb} ran twice")
        if not self.is_first:
            x = x.detach().requires_grad_(True)
        sink = WeightGradSink()
        census = SavedTensorCensus(exclude=set(self._param_ptrs))
        with deferring(sink), census.recording():
            out = self.module(x)
            if self.is_last:
                if self.loss_fn is None or targets is None:
                    raise RuntimeError(f"stage {self.index} is last: it needs loss_fn and targets")
                loss = self.loss_fn(out, targets)
                self.losses[mb] = float(loss.detach())
                out = loss * self.loss_scale
        saved = census.live_bytes
        self.memory.add(saved)
        self.pending[mb] = _Pending(x if not self.is_first else None, out, sink, census, saved)
        return loss.detach() if self.is_last else out.detach()

    def backward_input(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """I: the input gradient only; frees the graph and keeps what W needs."""
        self.before_backward(mb)
        st = self._get(mb, "backward_input")
        if st.done_input:
            raise RuntimeError(f"stage {self.index}: input backward of microbatch {mb} ran twice")
        if self.is_last:
            torch.autograd.backward(st.root)
        else:
            if grad is None:
                raise RuntimeError(f"stage {self.index}: backward needs the output gradient")
            torch.autograd.backward(st.root, grad)
        grad_in = st.x.grad if st.x is not None else None
        st.x = st.root = None
        st.done_input = True
        st.held_bytes = st.sink.nbytes
        self.memory.sub(st.saved_bytes)
        self.memory.add(st.held_bytes)
        return grad_in

    def backward_weight(self, mb: int) -> None:
        """W: the weight-gradient products, accumulated into ``.grad``; frees the rest."""
        st = self._get(mb, "backward_weight")
        if not st.done_input:
            raise RuntimeError(f"stage {self.index}: W of microbatch {mb} before its I")
        st.sink.run()
        self.memory.sub(st.held_bytes)
        del self.pending[mb]
