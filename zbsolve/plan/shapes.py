"""Model shapes the analytic cost model understands: dense GPT/Llama-style decoders and MoE.

A shape is what a config file says about a decoder-only transformer: depth, widths, heads, the
MLP kind, the attention kernel and the vocabulary. ``from_hf_config`` reads Hugging Face
``config.json`` files (Llama, Mistral, Qwen2/3, Mixtral, Qwen-MoE, GPT-2) strictly: a field it
needs and cannot find is an error naming the file and the field.

Families (``--hf``): ``gpt`` is Megatron's GPT as the Zero Bubble paper ran it (LayerNorm,
biases, GELU MLP of 4h, dropout, a materialised s x s softmax); ``llama`` is the Llama family
(RMSNorm, no biases, SwiGLU, grouped-query attention, flash attention, no dropout); ``mixtral``
is ``llama`` with a routed MoE MLP.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

MLP_KINDS = ("gelu", "swiglu")
ATTENTION_KINDS = ("materialised", "flash")


class ShapeError(ValueError):
    """A model shape that cannot be costed; the message names the field and the fix."""


@dataclass(frozen=True)
class MoE:
    """A routed mixture-of-experts MLP (every layer, as Mixtral; shared experts as Qwen-MoE)."""

    experts: int  # E, routed experts
    top_k: int  # experts per token
    expert_ffn: int  # intermediate size of one expert
    shared_ffn: int = 0  # intermediate size of the always-on shared expert(s), 0 = none
    capacity_factor: float = 1.0  # tokens an expert processes, relative to a perfect balance

    def check(self) -> None:
        for key in ("experts", "top_k", "expert_ffn"):
            if getattr(self, key) < 1:
                raise ShapeError(f"moe.{key}: expected an integer >= 1, got {getattr(self, key)}")
        if self.top_k > self.experts:
            raise ShapeError(f"moe.top_k: {self.top_k} exceeds the {self.experts} experts")
        if self.shared_ffn < 0 or self.capacity_factor < 1.0:
            raise ShapeError("moe: shared_ffn must be >= 0 and capacity_factor >= 1")


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int  # decoder blocks L
    hidden: int  # h
    heads: int  # a
    seq: int  # s, tokens per sequence
    vocab: int  # V
    ffn: int  # MLP intermediate size (dense layers)
    kv_heads: int  # grouped-query attention: heads of K and V
    mlp: str = "swiglu"  # gelu (two linears) | swiglu (gate, up, down)
    attention: str = "flash"  # materialised (s x s probabilities kept) | flash
    dropout: bool = False
    biases: bool = False
    rotary: bool = True  # rotary position embedding applied to Q and K in every block
    dtype_bytes: int = 2  # bf16 / fp16 activations and weights
    moe: MoE | None = None

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "heads", "seq", "vocab", "ffn", "kv_heads"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ShapeError(f"{key}: expected an integer >= 1, got {value!r}")
        if self.hidden % self.heads:
            raise ShapeError(f"heads: {self.heads} does not divide hidden {self.hidden}")
        if self.heads % self.kv_heads:
            raise ShapeError(f"kv_heads: {self.kv_heads} does not divide heads {self.heads}")
        if self.mlp not in MLP_KINDS:
            raise ShapeError(f"mlp: expected one of {MLP_KINDS}, got {self.mlp!r}")
        if self.attention not in ATTENTION_KINDS:
            raise ShapeError(f"attention: expected one of {ATTENTION_KINDS}, got {self.attention!r}")
        if self.moe is not None:
            self.moe.check()

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads x head size."""
        return self.kv_heads * (self.hidden // self.heads)

    def with_(self, **changes: Any) -> ModelShape:
        return replace(self, **changes)


def family(name: str, *, layers: int, hidden: int, heads: int, seq: int, vocab: int,
           ffn: int | None = None, kv_heads: int | None = None, moe: MoE | None = None,
           label: str | None = None) -> ModelShape:
    """A shape of a named family with the given sizes (``--hf NAME`` and the size flags)."""
    if name == "gpt":
        return ModelShape(label or "gpt", layers, hidden, heads, seq, vocab, ffn or 4 * hidden,
                          kv_heads or heads, mlp="gelu", attention="materialised", dropout=True,
                          biases=True, rotary=False, moe=moe)
    if name in ("llama", "mistral", "qwen2", "mixtral"):
        if name == "mixtral" and moe is None:
            raise ShapeError("--experts/--top-k/--expert-ffn: the mixtral family needs them")
        return ModelShape(label or name, layers, hidden, heads, seq, vocab,
                          ffn or _llama_ffn(hidden), kv_heads or heads, moe=moe)
    raise ShapeError(f"--hf: unknown model family {name!r}; known: gpt, llama, mistral, qwen2, "
                     "mixtral (or give --hf-config config.json)")


def _llama_ffn(hidden: int) -> int:
    """Llama's default intermediate size: 2/3 of 4h, rounded up to a multiple of 256."""
    return -(-int(8 * hidden / 3) // 256) * 256


def from_hf_config(path: str | Path, *, seq: int | None = None) -> ModelShape:
    """A shape from a Hugging Face ``config.json``; ``seq`` overrides the context length."""
    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ShapeError(f"{path}: cannot read a config.json: {exc}") from None
    if not isinstance(cfg, dict):
        raise ShapeError(f"{path}: expected a JSON object")
    kind = cfg.get("model_type")

    def need(*keys: str) -> int:
        for key in keys:
            if isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
                return cfg[key]
        raise ShapeError(f"{path}: {keys[0]}: missing or not an integer (model_type {kind!r})")

    known = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe")
    if kind not in known:
        raise ShapeError(f"{path}: model_type: unsupported {kind!r}; known: {', '.join(known)}")
    seq = seq or need("max_position_embeddings", "n_positions", "seq_length")
    if kind == "gpt2":
        hidden = need("n_embd")
        return family("gpt", layers=need("n_layer"), hidden=hidden, heads=need("n_head"), seq=seq,
                      vocab=need("vocab_size"), ffn=cfg.get("n_inner") or 4 * hidden,
                      label=f"gpt2-{path.parent.name or 'config'}")
    heads = need("num_attention_heads")
    moe = _hf_moe(cfg, path, need)
    return ModelShape(
        name=str(cfg.get("_name_or_path") or kind), layers=need("num_hidden_layers"),
        hidden=need("hidden_size"), heads=heads, seq=seq, vocab=need("vocab_size"),
        ffn=need("intermediate_size"), kv_heads=cfg.get("num_key_value_heads") or heads, moe=moe)


def _hf_moe(cfg: dict[str, Any], path: Path, need) -> MoE | None:
    if cfg.get("model_type") == "mixtral":
        return MoE(need("num_local_experts"), need("num_experts_per_tok"),
                   need("intermediate_size"))
    if cfg.get("model_type") in ("qwen2_moe", "qwen3_moe"):
        shared = cfg.get("shared_expert_intermediate_size") or 0
        return MoE(need("num_experts"), need("num_experts_per_tok"),
                   need("moe_intermediate_size"), shared_ffn=int(shared))
    return None


SIZE_FLAGS = ("layers", "hidden", "heads", "seq", "vocab", "ffn", "kv_heads")


def shape_from_flags(hf: str | None, hf_config: str | None, sizes: dict[str, int | None],
                     moe: dict[str, int | None] | None = None) -> ModelShape:
    """``zbsolve plan``'s model flags: a family and sizes, or a config.json (sizes given too
    override it); missing sizes are named in the error."""
    moe = {k: v for k, v in (moe or {}).items() if v is not None}
    routed = None
    if moe:
        missing = [k for k in ("experts", "top_k", "expert_ffn") if k not in moe]
        if missing:
            raise ShapeError(f"--{missing[0].replace('_', '-')}: an MoE model needs --experts, "
                             "--top-k and --expert-ffn")
        routed = MoE(moe["experts"], moe["top_k"], moe["expert_ffn"], moe.get("shared_ffn", 0))
    given = {k: v for k, v in sizes.items() if v is not None}
    if hf_config:
        shape = from_hf_config(hf_config, seq=given.pop("seq", None))
        if routed is not None:
            given["moe"] = routed
        return shape.with_(**given) if given else shape
    if not hf:
        raise ShapeError("--hf or --hf-config: say which model to plan for")
    missing = [k for k in ("layers", "hidden", "heads", "seq", "vocab") if k not in given]
    if missing:
        raise ShapeError(f"--{missing[0]}: required with --hf {hf} (or give --hf-config)")
    return family(hf, moe=routed, **given)
