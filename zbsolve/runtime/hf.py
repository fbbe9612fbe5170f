"""Hugging Face causal LMs built offline from a config (no weights, no network) as a layer list.

``hf_config("llama", layers=4, hidden=256, ...)`` makes a transformers config from our size flags
(or ``hf_config("path/config.json")`` reads a local one; flags override it), and
:func:`hf_layers` builds the model with random weights from a seed and cuts it into the layers a
pipeline splits: the token embedding, each decoder layer, and the final norm with the LM head.
Each layer takes one tensor and returns one (a decoder layer recomputes its rotary embedding
from the sequence length and runs causal SDPA with no mask, which is what the model's own
forward does for unpadded batches), so the layers run in torch's pipelining stages too.

Word embeddings are never tied: a pipeline puts the embedding and the head on different
stages. MoE experts run their ``eager`` implementation (a loop of per-expert linears): the
grouped-matmul kernel has no FLOP formula in ``torch.utils.flop_counter``, and the I/W split
check counts FLOPs. transformers is an optional extra (``pip install zbsolve[hf]``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

# our flag -> the transformers config key, per family (None: the family has no such knob)
FAMILIES: dict[str, str] = {
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3",
    "mixtral": "mixtral", "qwen2-moe": "qwen2_moe", "qwen3-moe": "qwen3_moe", "olmoe": "olmoe",
}
MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}
SIZE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "seq", "experts",
              "experts_per_token", "moe_intermediate")


class HFModelError(ValueError):
    """A Hugging Face model that cannot be built as asked; the message names the fix."""


def _transformers():
    try:
        import transformers
    except ImportError:
        raise HFModelError("--hf needs transformers: pip install 'zbsolve[hf]' (or make, which "
                           "installs the extras)") from None
    return transformers


def hf_config(name: str, **sizes: int | None) -> Any:
    """A transformers config: a family name (``llama``, ``mixtral``, ...) or a config.json path.

    Sizes (None = keep the family default or the file's value): layers, hidden, heads,
    kv_heads, intermediate, vocab, seq (max positions), experts, experts_per_token,
    moe_intermediate.
    """
    transformers = _transformers()
    unknown = set(sizes) - set(SIZE_FLAGS)
    if unknown:
        raise HFModelError(f"unknown size flag(s) {sorted(unknown)}; known: {', '.join(SIZE_FLAGS)}")
    path = Path(name)
    if name.endswith(".json") or path.is_dir():
        file = path / "config.json" if path.is_dir() else path
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise HFModelError(f"{file}: cannot read a Hugging Face config: {exc}") from None
        if not isinstance(data, dict) or "model_type" not in data:
            raise HFModelError(f"{file}: model_type: missing; a Hugging Face config.json names "
                               "its model_type (e.g. \"llama\")")
        model_type = data.pop("model_type")
    else:
        if name not in FAMILIES:
            raise HFModelError(f"--hf {name!r}: expected a family ({', '.join(FAMILIES)}) or a "
                               "path to a config.json")
        model_type, data = FAMILIES[name], {}
    for key, value in sizes.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise HFModelError(f"--{key.replace('_', '-')}: expected an integer >= 1, got {value!r}")
    s = {k: v for k, v in sizes.items() if v is not None}
    keys = {"layers": "num_hidden_layers", "hidden": "hidden_size",
            "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
            "intermediate": "intermediate_size", "vocab": "vocab_size",
            "seq": "max_position_embeddings", "experts": "num_local_experts",
            "experts_per_token": "num_experts_per_tok", "moe_intermediate": "moe_intermediate_size"}
    for flag, key in keys.items():
        if flag in s:
            if flag in ("experts", "experts_per_token", "moe_intermediate") and model_type not in MOE:
                raise HFModelError(f"--{flag.replace('_', '-')}: {model_type} has no experts; "
                                   f"use an MoE family ({', '.join(sorted(MOE))})")
            data[key] = s[flag]
    if "hidden" in s and "heads" in s and s["hidden"] % s["heads"]:
        raise HFModelError(f"--hidden {s['hidden']} must be divisible by --heads {s['heads']}")
    if "heads" in s and "head_dim" not in data and "hidden" in s:
        data["head_dim"] = s["hidden"] // s["heads"]
    if "kv_heads" in s and "heads" in s and s["heads"] % s["kv_heads"]:
        raise HFModelError(f"--heads {s['heads']} must be divisible by --kv-heads {s['kv_heads']}")
    data["tie_word_embeddings"] = False
    data["use_cache"] = False
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError, TypeError) as exc:
        raise HFModelError(f"model_type {model_type!r}: transformers cannot build it: {exc}") from None
    return config


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


class Embedding(nn.Module):
    def __init__(self, embed: nn.Module) -> None:
        super().__init__()
        self.embed = embed

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)


class DecoderLayer(nn.Module):
    """One decoder layer as a tensor -> tensor module (positions 0..T-1, causal, no padding)."""

    def __init__(self, layer: nn.Module, rotary: nn.Module | None) -> None:
        super().__init__()
        self.layer = layer
        self.rotary = rotary

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        kwargs: dict[str, Any] = {"attention_mask": None, "position_ids": positions}
        if self.rotary is not None:
            kwargs["position_embeddings"] = self.rotary(hidden, positions)
        return _first(self.layer(hidden, **kwargs))


class Head(nn.Module):
    def __init__(self, norm: nn.Module, lm_head: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.lm_head = lm_head

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(hidden))


class Reference(nn.Module):
    """The unsplit model through its own forward (logits), for the single-process reference."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, use_cache=False).logits


def build_model(config: Any, seed: int = 0) -> nn.Module:
    """The causal LM with random weights from ``seed`` (the global RNG is left as it was)."""
    transformers = _transformers()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kwargs = {"attn_implementation": "sdpa"}
        if config.model_type in MOE:
            kwargs["experts_implementation"] = "eager"
        model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    model.train()
    return model.float()


def hf_layers(model: nn.Module) -> tuple[list[nn.Module], list[str]]:
    """The pipeline layers of a causal LM and their FQNs in it.

    ``[embedding, decoder layer 0 .. L-1, final norm + LM head]``, named
    ``model.embed_tokens``, ``model.layers.i``, ``model.norm+lm_head``.
    """
    base = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm")
    if base is None or not all(hasattr(base, k) for k in needed) or not hasattr(model, "lm_head"):
        raise HFModelError(f"{type(model).__name__}: expected a decoder with model.embed_tokens, "
                           "model.layers, model.norm and lm_head (a Llama-style causal LM)")
    rotary = getattr(base, "rotary_emb", None)
    layers: list[nn.Module] = [Embedding(base.embed_tokens)]
    names = ["model.embed_tokens"]
    for i, layer in enumerate(base.layers):
        layers.append(DecoderLayer(layer, rotary))
        names.append(f"model.layers.{i}")
    layers.append(Head(base.norm, model.lm_head))
    names.append("model.norm+lm_head")
    return layers, names


def config_dict(config: Any) -> dict[str, Any]:
    """A plain JSON dict that :func:`config_from_dict` turns back into the same config (to ship):
    through the config's own JSON form, which writes ``id2label``'s integer keys as strings
    (the config turns them back into integers when it is rebuilt)."""
    import json

    return json.loads(config.to_json_string(use_diff=False))


def config_from_dict(data: dict[str, Any]) -> Any:
    transformers = _transformers()
    data = dict(data)
    return transformers.AutoConfig.for_model(data.pop("model_type"), **data)
