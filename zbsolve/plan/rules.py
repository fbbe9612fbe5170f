"""The layer splits people use today, as rules over (layers, stages), to compare a search with.

A split here counts *profile layers* per logical stage: the embedding and the head are one
layer each (``LayerProfile`` order: embedding, L blocks, head), so a split of L blocks over S
stages sums to L + 2.

- **torchtitan** (``generate_llm_fqn_per_model_part``; ``pipeline_parallel_first_stage_less_layers``
  = ``pipeline_parallel_last_stage_less_layers`` = 1 by default): the embedding and the head
  count as that many layers; the L + 2 "effective layers" are spread evenly, the first
  (L + 2) mod S stages taking one more.
- **Zero Bubble repository** (Megatron with ``--allow-padding-num-layers``; its README recommends
  ``num_layers = k * p - 2``): L is padded up to a multiple of p (k = ceil(L / p) blocks per
  stage, k / v per chunk), and the padding is taken one block at a time from the last chunk,
  then the first, the second, ... (their ``get_offset``). When L = k p - 2 that is exactly "the
  first and last stage hold one block less", which makes up for the embedding and the head;
  when p divides L (all four of the paper's models) it is the even split.
"""

from __future__ import annotations


class RuleError(ValueError):
    """A rule that cannot split this model over these stages."""


def torchtitan_split(blocks: int, stages: int, input_weight: int = 1, output_weight: int = 1
                     ) -> list[int]:
    """torchtitan's default split, as profile layers per stage."""
    if stages < 2:
        return [blocks + 2]
    effective = blocks + input_weight + output_weight
    base, extra = divmod(effective, stages)
    if base == 0 or input_weight > base or output_weight > base:
        raise RuleError(f"torchtitan: {effective} effective layers cannot fill {stages} stages "
                        f"with input/output weights {input_weight}/{output_weight}")
    per_stage = [base + (1 if s < extra else 0) for s in range(stages)]
    out = list(per_stage)
    out[0] = per_stage[0] - input_weight + 1  # the embedding is one profile layer
    out[-1] = per_stage[-1] - output_weight + 1  # so is the head
    if sum(out) != blocks + 2:  # torchtitan stops adding blocks when it runs out
        out[-1] -= sum(out) - (blocks + 2)
    if min(out) < 1:
        raise RuleError(f"torchtitan: the split {out} leaves a stage empty")
    return out


def zero_bubble_split(blocks: int, devices: int, chunks: int = 1) -> list[int]:
    """The Zero Bubble repository's (Megatron's padded) split, as profile layers per stage."""
    remainder = blocks % devices
    padded = blocks if remainder == 0 else blocks - remainder + devices
    per_device = padded // devices
    if per_device % chunks:
        raise RuleError(f"zero-bubble: {per_device} blocks per device do not split into "
                        f"{chunks} chunks")
    sizes = [per_device // chunks] * (devices * chunks)
    for index in range(-1, padded - blocks - 1):  # last, first, second, ...
        sizes[index] -= 1
    sizes[0] += 1  # embedding
    sizes[-1] += 1  # head
    if min(sizes) < 1:
        raise RuleError(f"zero-bubble: padding {padded - blocks} blocks leaves a stage empty")
    return sizes


def even_split(blocks: int, stages: int) -> list[int]:
    """Blocks spread evenly (the first stages take the remainder), embedding and head on top."""
    base, extra = divmod(blocks, stages)
    if base == 0:
        raise RuleError(f"even: {blocks} blocks cannot fill {stages} stages")
    sizes = [base + (1 if s < extra else 0) for s in range(stages)]
    sizes[0] += 1
    sizes[-1] += 1
    return sizes


RULES = {"torchtitan": torchtitan_split, "zero-bubble": zero_bubble_split}
