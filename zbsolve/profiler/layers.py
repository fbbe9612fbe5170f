"""``profile_layers``: per-layer F, I, W and memory of any torch model, as a LayerProfile.

Each layer is measured on its own, fed the output the layers before it give for the example
input (computed once, without a graph), with a fixed random output gradient (the last layer
computes the loss instead, inside its F). One sample = F, I, W of one microbatch, then a fresh F
and the plain fused backward B, so every profile also says how I + W compares with B. The split
is the graph-based one the runner executes (:mod:`zbsolve.runtime.graph_split`): I computes the
input gradient only, W the weight gradients only. A layer whose input has no gradient (token
ids) has nothing to compute at I: its whole backward is W.

Before timing, every layer's split is checked once by FLOP counts
(``torch.utils.flop_counter``): I + W must not exceed B. A layer whose split fails that check,
or holds a Python ``autograd.Function`` the split cannot trust, is profiled fused (I = B,
W = 0), and ``meta.fallbacks`` says which and why; the runner falls back the same way.

Memory per layer and microbatch: ``activation`` = the distinct non-parameter storages autograd
keeps after F (CPU: counted by :class:`~zbsolve.runtime.graph_split.SavedTensorCensus`; CUDA:
``memory_allocated`` deltas); ``weight`` = what is still held after I (the saved tensors the
retained graph keeps plus the gradients kept for W). With the graph split the retained graph
keeps what F saved, so ``weight`` is close to ``activation``: measured, not assumed.
``activation`` is raised to ``weight`` when the kept gradients make it larger (the instance's
memory model frees at I, never allocates), and the raw figures are kept in ``meta``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from zbsolve.layers import LayerCost, LayerProfile
from zbsolve.profiler.timing import Spread, Stopwatch, check_counts
from zbsolve.runtime.graph_split import SavedTensorCensus, split_backward_input
from zbsolve.runtime.layered import differentiable
from zbsolve.runtime.models import layers_of

FLOP_TOLERANCE = 0.01  # I + W may exceed B by this fraction before the split is not trusted


@dataclass
class _Layer:
    name: str
    module: nn.Module
    params: list[torch.Tensor]
    x: torch.Tensor  # the input (detached)
    out_grad: torch.Tensor | None  # None on the last layer (the loss is the root)
    fused: str = ""
    times: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in "FIWB"})
    saved: list[float] = field(default_factory=list)
    held: list[float] = field(default_factory=list)
    flops: dict[str, int] = field(default_factory=dict)


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


class _Sampler:
    """Runs one layer's F, I, W (split) or F, B (fused) and reports times and memory."""

    def __init__(self, loss: Callable[[torch.Tensor], torch.Tensor], n_layers: int,
                 watch: Stopwatch, device: torch.device) -> None:
        self.loss, self.n_layers, self.watch, self.device = loss, n_layers, watch, device
        self.cuda = device.type == "cuda"

    def _forward(self, layer: _Layer, last: bool):
        x = layer.x.detach()
        if differentiable(x):
            x.requires_grad_(True)
        ptrs = {p.untyped_storage().data_ptr() for p in layer.module.parameters()}
        census = SavedTensorCensus(exclude=ptrs)
        with census.recording():
            out = layer.module(x)
            root = self.loss(out) if last else out
        return x, root, census

    def _mem(self, census: SavedTensorCensus) -> int:
        return torch.cuda.memory_allocated(self.device) if self.cuda else census.live_bytes

    def split(self, layer: _Layer, last: bool) -> tuple[float, float, float, float, float]:
        base = torch.cuda.memory_allocated(self.device) if self.cuda else 0
        t_f, (x, root, census) = self.watch.time(lambda: self._forward(layer, last))
        after_f = self._mem(census) - base
        inputs = [x] if x.requires_grad else []

        def input_pass():
            return split_backward_input([root], [layer.out_grad], inputs, layer.params,
                                        force_fused=layer.fused, census=census)

        t_i, (_, weights) = self.watch.time(input_pass)
        x.grad = None
        after_i = self._mem(census) - base + (0 if self.cuda else weights.held_bytes)
        t_w, _ = self.watch.time(weights.run)
        return t_f, t_i, t_w, after_f, after_i

    def fused(self, layer: _Layer, last: bool) -> float:
        x, root, _ = self._forward(layer, last)
        targets = ([x] if x.requires_grad else []) + layer.params
        t_b, _ = self.watch.time(lambda: torch.autograd.backward(root, layer.out_grad,
                                                                 inputs=targets))
        return t_b

    def count_flops(self, layer: _Layer, last: bool) -> dict[str, int]:
        counts = {}
        with FlopCounterMode(display=False) as f:
            x, root, _ = self._forward(layer, last)
        counts["F"] = f.get_total_flops()
        inputs = [x] if x.requires_grad else []
        with FlopCounterMode(display=False) as fi:
            _, weights = split_backward_input([root], [layer.out_grad], inputs, layer.params)
        with FlopCounterMode(display=False) as fw:
            weights.run()
        counts["I"], counts["W"] = fi.get_total_flops(), fw.get_total_flops()
        if weights.fallback:
            layer.fused = weights.fallback
        x, root, _ = self._forward(layer, last)
        with FlopCounterMode(display=False) as fb:
            torch.autograd.backward(root, layer.out_grad,
                                    inputs=([x] if x.requires_grad else []) + layer.params)
        counts["B"] = fb.get_total_flops()
        return counts


def profile_layers(layers: Any, example_input: Any, loss_fn: Callable, *,
                   target: Any = None, split_points: Sequence[str] | None = None,
                   names: Sequence[str] | None = None, warmup: int = 3, repeats: int = 10,
                   device: str | torch.device = "cpu", clock: str = "wall",
                   check_flops: bool = True, interval: float = 0.0,
                   meta: dict[str, Any] | None = None) -> LayerProfile:
    """Per-layer costs of a model, for one microbatch (``example_input``).

    ``layers``: a list of modules (each one tensor in, one out), an ``nn.Sequential``, or a model
    with ``split_points`` (the FQNs where a layer begins, as torch's pipelining and torchtitan
    name them; the model is cut by torch's tracer). ``loss_fn(output)``, or
    ``loss_fn(output, target)`` when ``target`` is given, makes the last layer's loss.
    ``names`` overrides the layer names (default: the FQNs, or the list positions).
    Times in ms (median of ``repeats`` after ``warmup``), memory in bytes.
    """
    check_counts(repeats, warmup)
    modules, found = layers_of(layers, example_input, split_points)
    if names is not None and len(names) != len(modules):
        raise ValueError(f"names: {len(names)} given for {len(modules)} layers")
    names = list(names or found)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: no CUDA device is visible; use cpu")
    watch = Stopwatch(cuda=dev.type == "cuda", clock=clock)
    if clock == "cpu" and torch.get_num_threads() != 1:
        raise ValueError("clock cpu counts the calling thread only: use it with one torch thread")
    modules = [m.to(dev) for m in modules]
    x = example_input.to(dev) if isinstance(example_input, torch.Tensor) else example_input
    tgt = target.to(dev) if isinstance(target, torch.Tensor) else target

    def loss(out: torch.Tensor) -> torch.Tensor:
        return loss_fn(out) if target is None else loss_fn(out, tgt)

    gen = torch.Generator().manual_seed(1234)
    prepared: list[_Layer] = []
    with torch.no_grad():
        for i, (name, module) in enumerate(zip(names, modules)):
            out = module(x)
            if not isinstance(out, torch.Tensor):
                raise ValueError(f"layer {name!r} returned {type(out).__name__}; every layer "
                                 "must return one tensor (wrap it to return the hidden state)")
            last = i == len(modules) - 1
            grad = None if last else (torch.randn(out.shape, generator=gen) * 1e-3).to(
                device=dev, dtype=out.dtype)
            params = [p for p in module.parameters() if p.requires_grad]
            prepared.append(_Layer(name, module, params, x, grad))
            x = out
        boundaries = [_nbytes(layer.x) for layer in prepared[1:]] + [0]
    sampler = _Sampler(loss, len(prepared), watch, dev)
    n = len(prepared)
    if check_flops:
        for i, layer in enumerate(prepared):
            layer.flops = sampler.count_flops(layer, i == n - 1)
            c = layer.flops
            if not layer.fused and c["B"] and c["I"] + c["W"] > c["B"] * (1 + FLOP_TOLERANCE):
                layer.fused = (f"I + W = {c['I'] + c['W']} FLOPs exceeds B = {c['B']}: the split "
                               "repeats work here, so this layer's backward runs fused")
            _zero(layer)
    for step in range(warmup + repeats):
        if interval and step:
            time.sleep(interval)
        for i, layer in enumerate(prepared):
            last = i == n - 1
            t_f, t_i, t_w, saved, held = sampler.split(layer, last)
            t_b = sampler.fused(layer, last)
            _zero(layer)
            if step >= warmup:
                for k, v in zip("FIWB", (t_f, t_i, t_w, t_b)):
                    layer.times[k].append(v)
                layer.saved.append(saved)
                layer.held.append(held)
    costs, spreads, fallbacks, raw = [], {}, {}, {}
    for i, layer in enumerate(prepared):
        med = {k: Spread.of(v) for k, v in layer.times.items()}
        saved = max(Spread.of(layer.saved).median, 0.0)
        held = max(Spread.of(layer.held).median, 0.0)
        costs.append(LayerCost(
            name=layer.name, F=med["F"].median, I=med["I"].median, W=med["W"].median,
            activation=max(saved, held), weight=held,
            params=float(sum(_nbytes(p) for p in layer.module.parameters())),
            boundary=float(boundaries[i])))
        spreads[layer.name] = {k: s.to_dict() for k, s in med.items()}
        raw[layer.name] = {"saved_by_F": saved, "held_after_I": held}
        if layer.fused:
            fallbacks[layer.name] = layer.fused
    label = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    info = {
        "device": label, "clock": watch.clock if dev.type != "cuda" else "cuda events",
        "threads": torch.get_num_threads(), "warmup": warmup, "repeats": repeats,
        "torch": str(torch.__version__), "units": {"time": "ms", "memory": "bytes"},
        "fused_B_ms": {layer.name: Spread.of(layer.times["B"]).median for layer in prepared},
        "spread": spreads, "memory": raw, "fallbacks": fallbacks,
        "flops": {layer.name: layer.flops for layer in prepared if layer.flops},
        "memory_method": ("CUDA allocator deltas" if dev.type == "cuda" else
                          "live saved-tensor storages (census) + gradients kept for W"),
        **(meta or {}),
    }
    source = (f"profiled on {label} ({info['clock']} clock, median of {repeats} after "
              f"{warmup} warm-up), graph I/W split")
    return LayerProfile(tuple(costs), source, info)


def _zero(layer: _Layer) -> None:
    for p in layer.module.parameters():
        p.grad = None


def iw_over_b(profile: LayerProfile) -> dict[str, float]:
    """Per layer, measured (I + W) / B: ~1 when the split does no extra work."""
    b = profile.meta.get("fused_B_ms", {})
    return {c.name: (c.I + c.W) / b[c.name] for c in profile.layers if b.get(c.name)}


def flop_ratios(profile: LayerProfile) -> dict[str, float]:
    """Per layer, FLOPs (I + W) / B (exactly 1 when the split is clean)."""
    out = {}
    for name, c in profile.meta.get("flops", {}).items():
        if c.get("B"):
            out[name] = (c["I"] + c["W"]) / c["B"]
    return out


def profile_spec(spec, *, warmup: int = 3, repeats: int = 10, device: str = "cpu",
                 clock: str = "wall", interval: float = 0.0,
                 check_flops: bool = True) -> LayerProfile:
    """Profile a :class:`~zbsolve.runtime.models.ModelSpec` (HF config, ``--module``, GPT)."""
    from zbsolve.runtime.models import spec_name, spec_summary

    model = spec.build()
    tokens, targets = model.batch(1, 0)
    return profile_layers(model.layers, tokens, model.loss_fn, target=targets, names=model.names,
                          warmup=warmup, repeats=repeats, device=device, clock=clock,
                          interval=interval, check_flops=check_flops,
                          meta={"model": spec_name(spec), "summary": spec_summary(spec),
                                "spec": spec.to_dict(),
                                "microbatch_size": model.microbatch_size,
                                "boundary_shape": list(model.boundary)})
