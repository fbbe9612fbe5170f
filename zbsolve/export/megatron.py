"""A layer split as Megatron-LM's flags; Megatron cannot load the schedule itself.

Megatron-LM places layers with ``--pipeline-model-parallel-layout``: one string over all
virtual stages, ``E`` the embedding, ``t`` a transformer layer, ``L`` the loss (final norm, output
layer and loss), stages separated by ``|`` and repetitions written ``t*3``; with it the
number of virtual stages per rank is the layout's stage count / p. The older flags
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` only set the
first and last stage's decoder layers and need the rest even; they are given when they suffice.

The schedule is another matter: Megatron runs its own 1F1B / interleaved 1F1B from code
(``schedules.py``), with a fused backward, and reads no per-rank action list. A zbsolve schedule
cannot be loaded there; what transfers is the layout (and, with ``zbsolve solve
--fused-backward``, the knowledge of what the best fused-backward schedule would reach).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NOTE = ("Megatron-LM runs its built-in 1F1B / interleaved 1F1B schedule with a fused backward; "
        "it has no way to load a per-rank schedule (CSV or table), so only the layer layout "
        "(these flags) transfers.")


class MegatronExportError(ValueError):
    """A split Megatron cannot express; the message names the fix."""


def _stage_text(n_embed: int, blocks: int, n_head: int) -> str:
    parts = ["E"] * n_embed
    if blocks == 1:
        parts.append("t")
    elif blocks > 1:
        parts.append(f"t*{blocks}")
    parts += ["L"] * n_head
    return "".join(parts)


def megatron_flags(split: Sequence[int], *, embedding_layers: int = 1, head_layers: int = 1,
                   chunks: int = 1) -> dict[str, Any]:
    """The flags for a split of ``[embedding layers, blocks, head layers]`` into stages.

    ``split``: layers per logical stage (stage order = Megatron's virtual stage order, which is
    a loop placement: virtual stage s on rank s mod p). ``chunks``: virtual stages per rank.
    """
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in split):
        raise MegatronExportError(f"split {list(split)}: every stage needs an integer >= 1 layers")
    if not isinstance(chunks, int) or chunks < 1 or len(split) % chunks:
        raise MegatronExportError(f"chunks {chunks!r}: the split's {len(split)} stages must be "
                                  "a multiple of the virtual stages per rank")
    total = sum(split)
    blocks_total = total - embedding_layers - head_layers
    if blocks_total < 0 or split[0] < embedding_layers or split[-1] < head_layers:
        raise MegatronExportError(
            f"split {list(split)}: the first stage must hold the {embedding_layers} embedding "
            f"layer(s) and the last the {head_layers} head layer(s)")
    stages, blocks = [], []
    for s, k in enumerate(split):
        e = embedding_layers if s == 0 else 0
        h = head_layers if s == len(split) - 1 else 0
        blocks.append(k - e - h)
        stages.append(_stage_text(1 if e else 0, k - e - h, 1 if h else 0))
    layout = "|".join(stages)
    p = len(split) // chunks
    flags: dict[str, Any] = {
        "--pipeline-model-parallel-size": p,
        "--num-layers": blocks_total,
        "--pipeline-model-parallel-layout": layout,
    }
    middle = blocks[1:-1]
    if chunks == 1 and len(split) > 2 and len(set(middle)) == 1:
        flags_alt = {"--decoder-first-pipeline-num-layers": blocks[0],
                     "--decoder-last-pipeline-num-layers": blocks[-1]}
    else:
        flags_alt = {}
    return {"flags": flags, "first_last_flags": flags_alt, "blocks_per_stage": blocks,
            "note": NOTE}


def command_line(result: dict[str, Any]) -> str:
    return " ".join(f"{k} {v!s}" if "|" not in str(v) else f"{k} '{v}'"
                    for k, v in result["flags"].items())
