"""Models the runner and the profiler take as an ordered list of layers, and how to ship them.

A :class:`LayeredModel` is what a pipeline needs of a model: its layers in order (each one
tensor in, one tensor out), their FQNs, the unsplit forward for the single-process reference,
the loss and a batch source. It comes from a :class:`ModelSpec`, a small picklable description
every rank rebuilds identically (same seed, same parameters):

- ``hf``: a Hugging Face causal LM from a config (:mod:`zbsolve.runtime.hf`);
- ``module``: ``pkg.mod:build``, a function returning ``(layers, example_input, loss_fn)`` as
  :func:`zbsolve.profile_layers` takes them (every microbatch is the example input);
- ``gpt``: the runner's own GPT cut into layers (embedding, blocks, head): the generic split on
  a model whose custom split is known, for the tests.

:func:`layers_of` turns what a user hands :func:`zbsolve.profile_layers` (a list of modules, an
``nn.Sequential``, or a model plus the FQNs where stages may begin, cut by torch's pipelining
tracer) into that list.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as Fn
from torch import nn

from zbsolve.runtime.layered import LayerStack

KINDS = ("hf", "module", "gpt")


class ModelSpecError(ValueError):
    """A model description that cannot be built; the message names the field and the fix."""


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of one microbatch."""
    return Fn.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def default_split(n_layers: int, n_stages: int) -> list[int]:
    """Layers per stage: the first layer (embedding) with the first stage, the last (head)
    with the last, the rest as even as possible (earlier stages larger), like the GPT's
    ``layer_split``."""
    if n_stages < 1:
        raise ModelSpecError(f"stages: expected >= 1, got {n_stages}")
    if n_stages == 1:
        return [n_layers]
    inner = n_layers - 2
    if inner < n_stages:
        raise ModelSpecError(
            f"the model has {inner} layers between its first and last, too few for {n_stages} "
            f"stages (each needs one): use more layers (--layers {n_stages}), fewer stages, or "
            "an explicit --split")
    base, extra = divmod(inner, n_stages)
    split = [base + (1 if s < extra else 0) for s in range(n_stages)]
    split[0] += 1
    split[-1] += 1
    return split


@dataclass
class LayeredModel:
    layers: list[nn.Module]
    names: list[str]
    reference: nn.Module  # the unsplit forward (may be the layers in sequence)
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    batch: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]  # (m, step) -> all microbatches
    microbatch_size: int
    boundary: tuple[int, ...]  # shape of the tensor between two layers
    param_names: dict[int, str] = field(default_factory=dict)  # id(param) -> name in reference

    def __post_init__(self) -> None:
        if not self.param_names:
            self.param_names = {id(p): n for n, p in self.reference.named_parameters()}

    def default_split(self, n_stages: int) -> list[int]:
        return default_split(len(self.layers), n_stages)

    def check_split(self, split: Sequence[int]) -> None:
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in split):
            raise ModelSpecError(f"split {list(split)}: every stage needs an integer >= 1 layers")
        if sum(split) != len(self.layers):
            raise ModelSpecError(f"split {list(split)} covers {sum(split)} layers, the model has "
                                 f"{len(self.layers)} ({', '.join(self.names[:3])}, ...)")

    def stages(self, split: Sequence[int]) -> list[LayerStack]:
        self.check_split(split)
        out, start = [], 0
        for n in split:
            out.append(LayerStack(self.layers[start:start + n], self.names[start:start + n]))
            start += n
        return out

    def global_names(self, module: nn.Module) -> dict[str, nn.Parameter]:
        """A stage's parameters under their names in the unsplit model."""
        out = {}
        for local, p in module.named_parameters():
            name = self.param_names.get(id(p))
            if name is None:
                raise ModelSpecError(f"parameter {local} of a stage is not a parameter of the "
                                     "reference model")
            out[name] = p
        return out

    def microbatch(self, t: torch.Tensor, mb: int) -> torch.Tensor:
        size = self.microbatch_size
        return t[mb * size:(mb + 1) * size]


@dataclass(frozen=True)
class ModelSpec:
    """What every rank rebuilds: kind and options (all plain data, so it pickles and prints)."""

    kind: str
    options: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ModelSpec:
        data = dict(data)
        kind = data.pop("kind", None)
        if kind not in KINDS:
            raise ModelSpecError(f"model kind: expected one of {KINDS}, got {kind!r}")
        return ModelSpec(kind, data)

    def build(self) -> LayeredModel:
        return _BUILDERS[self.kind](**self.options)


def token_batches(vocab: int, seq: int, microbatch_size: int, seed: int):
    """(m, step) -> (tokens, targets) of one optimizer step, identical on every rank."""
    def batch(m: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * (step + 1))
        data = torch.randint(0, vocab, (m * microbatch_size, seq + 1), generator=gen)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()
    return batch


def hf_spec(config: Any, *, seq: int, microbatch_size: int, seed: int = 0) -> ModelSpec:
    from zbsolve.runtime.hf import config_dict

    return ModelSpec("hf", {"config": config_dict(config), "seq": seq,
                            "microbatch_size": microbatch_size, "seed": seed})


def _build_hf(config: dict[str, Any], seq: int, microbatch_size: int, seed: int = 0) -> LayeredModel:
    from zbsolve.runtime.hf import Reference, build_model, config_from_dict, hf_layers

    cfg = config_from_dict(config)
    if seq > cfg.max_position_embeddings:
        raise ModelSpecError(f"--seq {seq} exceeds the config's max_position_embeddings "
                             f"{cfg.max_position_embeddings}; lower --seq")
    model = build_model(cfg, seed)
    layers, names = hf_layers(model)
    return LayeredModel(layers, names, Reference(model), lm_loss,
                        token_batches(cfg.vocab_size, seq, microbatch_size, seed),
                        microbatch_size, (microbatch_size, seq, cfg.hidden_size),
                        {id(p): n for n, p in model.named_parameters()})


def _build_gpt(seed: int = 0, **sizes: int) -> LayeredModel:
    from zbsolve.runtime.model import GPT, GPTConfig

    cfg = GPTConfig(seed=seed, **sizes)
    full = GPT(cfg)
    layers = [full.embed, *full.blocks, full.head]
    names = ["embed", *(f"blocks.{i}" for i in range(cfg.layers)), "head"]
    return LayeredModel(layers, names, full, lm_loss,
                        token_batches(cfg.vocab, cfg.seq, cfg.microbatch_size, seed),
                        cfg.microbatch_size, (cfg.microbatch_size, cfg.seq, cfg.hidden))


def load_builder(target: str) -> Callable[[], Any]:
    """``pkg.mod:function`` -> the function (import errors say what to fix)."""
    if not isinstance(target, str) or target.count(":") != 1:
        raise ModelSpecError(f"--module {target!r}: expected pkg.mod:function")
    mod_name, fn_name = target.split(":")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ModelSpecError(f"--module {target}: cannot import {mod_name!r}: {exc}") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ModelSpecError(f"--module {target}: {mod_name} has no function {fn_name!r}")
    return fn


def call_builder(target: str) -> tuple[list[nn.Module], list[str], Any, Callable]:
    """Run a user's build function: (layers, names, example_input, loss_fn)."""
    built = load_builder(target)()
    if not (isinstance(built, tuple) and len(built) == 3):
        raise ModelSpecError(f"--module {target}: the function must return (layers, "
                             "example_input, loss_fn)")
    layers, example, loss_fn = built
    if not callable(loss_fn):
        raise ModelSpecError(f"--module {target}: loss_fn (third value) is not callable")
    mods, names = layers_of(layers)
    return mods, names, example, loss_fn


def _build_module(target: str, seed: int = 0) -> LayeredModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers, names, example, user_loss = call_builder(target)
    if not isinstance(example, torch.Tensor):
        raise ModelSpecError(f"--module {target}: example_input must be one tensor (a microbatch)")
    reference = nn.Sequential(*layers)
    with torch.no_grad():  # the runner's P2P moves one fp32 shape between every two layers
        shapes, x = set(), example
        for layer in layers[:-1]:
            x = layer(x)
            shapes.add((tuple(x.shape), x.dtype))
    if len(shapes) > 1 or any(dtype != torch.float32 for _, dtype in shapes):
        raise ModelSpecError(f"--module {target}: the layers hand on tensors of shapes/dtypes "
                             f"{sorted(str(s) for s in shapes)}; the runner needs one fp32 shape "
                             "between every two layers (profiling has no such limit)")
    boundary = next(iter(shapes))[0] if shapes else ()

    def batch(m: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.cat([example] * m)
        return tokens, torch.zeros(len(tokens))

    def loss(out: torch.Tensor, _targets: torch.Tensor) -> torch.Tensor:
        return user_loss(out)

    return LayeredModel(list(layers), names, reference, loss, batch, len(example), boundary)


_BUILDERS: dict[str, Callable[..., LayeredModel]] = {
    "hf": _build_hf, "module": _build_module, "gpt": _build_gpt,
}


def layers_of(layers: Any, example_input: Any = None,
              split_points: Sequence[str] | None = None) -> tuple[list[nn.Module], list[str]]:
    """(modules, names) from a list of modules, an ``nn.Sequential``, or a model plus the FQNs
    at which a layer begins (traced and cut by ``torch.distributed.pipelining.pipeline``)."""
    if split_points is not None:
        return _traced(layers, example_input, list(split_points))
    if isinstance(layers, nn.Sequential):
        return list(layers), [name for name, _ in layers.named_children()]
    if isinstance(layers, (list, tuple, nn.ModuleList)) and layers and all(
            isinstance(m, nn.Module) for m in layers):
        return list(layers), [str(i) for i in range(len(layers))]
    raise ModelSpecError("layers: expected a list of nn.Module, an nn.Sequential, or a model "
                         "with split_points=[FQN, ...]")


def _traced(model: nn.Module, example_input: Any, split_points: list[str]):
    from torch.distributed.pipelining import SplitPoint, pipeline

    if not isinstance(model, nn.Module):
        raise ModelSpecError("split_points: the first argument must be the model (an nn.Module)")
    known = {name for name, _ in model.named_modules()}
    bad = [fqn for fqn in split_points if fqn not in known]
    if bad:
        raise ModelSpecError(f"split_points: {bad[0]!r} is not a module of the model; use the "
                             "FQNs of model.named_modules() (e.g. 'layers.4')")
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    pipe = pipeline(model, mb_args=args,
                    split_spec={fqn: SplitPoint.BEGINNING for fqn in split_points})
    names = ["<start>", *split_points][: pipe.num_stages]
    return [pipe.get_stage_module(i) for i in range(pipe.num_stages)], names


def spec_summary(spec: ModelSpec) -> dict[str, Any]:
    """A short, printable description (the HF config reduced to its sizes)."""
    if spec.kind != "hf":
        return spec.to_dict()
    c = spec.options["config"]
    keys = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "vocab_size", "num_local_experts",
            "num_experts_per_tok")
    return {"kind": "hf", **{k: c[k] for k in keys if k in c},
            **{k: v for k, v in spec.options.items() if k != "config"}}


def spec_name(spec: ModelSpec) -> str:
    """A short name for files and instances, e.g. ``llama-l4-h64``."""
    if spec.kind == "hf":
        c = spec.options["config"]
        return f"{c['model_type']}-l{c['num_hidden_layers']}-h{c['hidden_size']}"
    if spec.kind == "gpt":
        o = spec.options
        return f"gpt-l{o.get('layers', 8)}-h{o.get('hidden', 64)}"
    return spec.options["target"].replace(":", "-").replace(".", "-")


__all__ = ["LayeredModel", "ModelSpec", "layers_of", "hf_spec"]


def spec_from_flags(*, hf: str | None = None, module: str | None = None, seq: int | None = None,
                    microbatch_size: int | None = None, seed: int = 0,
                    **sizes: int | None) -> ModelSpec:
    """The spec ``--hf NAME|config.json`` (with size flags) or ``--module pkg.mod:build`` ask for."""
    if (hf is None) == (module is None):
        raise ModelSpecError("give exactly one of --hf and --module")
    if module is not None:
        given = [k for k, v in {**sizes, "seq": seq}.items() if v is not None]
        if given:
            raise ModelSpecError(f"--module {module}: size flags ({', '.join(given)}) apply to "
                                 "--hf only; the build function sizes its model")
        return ModelSpec("module", {"target": module, "seed": seed})
    from zbsolve.runtime.hf import hf_config

    seq = seq or 64
    config = hf_config(hf, seq=sizes.pop("max_positions", None) or max(seq, 2 * seq), **sizes)
    return hf_spec(config, seq=seq, microbatch_size=microbatch_size or 1, seed=seed)
