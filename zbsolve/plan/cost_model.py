"""The analytic cost model: a model shape on an accelerator -> a per-layer ``LayerProfile``.

Layers, in order: the embedding, the L decoder blocks, the head (final norm + LM head + loss);
each is a ``LayerCost`` with F, I, W in ms (the roofline sum of its kernels,
``zbsolve.plan.kernels``), activation and W-kept bytes (``zbsolve.plan.memory``), bf16 parameter
bytes and the boundary tensor (t x h in the activation dtype) it hands on. The profile is the
same type the profiler measures, so the split search and the solver do not care which one made
it.
"""

from __future__ import annotations

from dataclasses import asdict

from zbsolve.layers import LayerCost, LayerProfile
from zbsolve.plan import kernels, memory
from zbsolve.plan.accelerators import Accelerator
from zbsolve.plan.shapes import ModelShape


def pass_times_ms(ks: list[kernels.Kernel], accel: Accelerator, efficiency: float | None
                  ) -> dict[str, float]:
    """F, I and W of a layer in ms: each pass's kernels, one after another."""
    out = dict.fromkeys(kernels.PASSES, 0.0)
    for k in ks:
        out[k.pass_] += 1e3 * accel.kernel_seconds(k.flops, k.bytes, efficiency)
    return out


def _layer(name: str, ks: list[kernels.Kernel], accel: Accelerator, efficiency: float | None,
           act_wgt: tuple[float, float], params: int, boundary: float, e: int) -> LayerCost:
    t = pass_times_ms(ks, accel, efficiency)
    return LayerCost(name, F=t["F"], I=t["I"], W=t["W"], activation=act_wgt[0],
                     weight=act_wgt[1], params=float(params * e), boundary=boundary)


def analytic_profile(shape: ModelShape, accel: Accelerator, microbatch_size: int,
                     efficiency: float | None = None) -> LayerProfile:
    """Per-layer costs of ``shape`` for microbatches of ``microbatch_size`` sequences."""
    if isinstance(microbatch_size, bool) or not isinstance(microbatch_size, int) \
            or microbatch_size < 1:
        raise ValueError(f"--microbatch-size: expected an integer >= 1, got {microbatch_size!r}")
    eta = accel.efficiency if efficiency is None else efficiency
    if not 0 < eta <= 1:
        raise ValueError(f"--efficiency: expected a fraction in (0, 1], got {eta!r}")
    b, e = microbatch_size, shape.dtype_bytes
    t = float(b * shape.seq)
    boundary = e * t * shape.hidden
    per_token = memory.block_bytes_per_token(shape)
    block = _layer("layers.{}", kernels.decoder_block(shape, t), accel, eta,
                   (per_token[0] * t, per_token[1] * t), memory.block_params(shape), boundary, e)
    layers = [_layer("tok_embeddings", kernels.embedding(shape, t), accel, eta,
                     memory.embedding_bytes(shape, b), memory.embedding_params(shape),
                     boundary, e)]
    layers += [_named(block, f"layers.{i}") for i in range(shape.layers)]
    layers.append(_layer("norm+output", kernels.head(shape, t), accel, eta,
                         memory.head_bytes(shape, b), memory.head_params(shape), 0.0, e))
    meta = {"model": shape.name, "shape": _shape_dict(shape), "accelerator": accel.name,
            "efficiency": eta, "microbatch_size": b, "tokens_per_microbatch": int(t),
            "param_dtype_bytes": e, "embedding_layers": 1, "head_layers": 1}
    return LayerProfile(tuple(layers), source=f"analytic {accel.name} eta={eta:g}", meta=meta)


def _named(cost: LayerCost, name: str) -> LayerCost:
    return LayerCost(name, cost.F, cost.I, cost.W, cost.activation, cost.weight, cost.params,
                     cost.boundary)


def _shape_dict(shape: ModelShape) -> dict:
    data = asdict(shape)
    if shape.moe is None:
        data.pop("moe")
    return data
