"""PyTorch's schedules as peers: our generators emit the orders torch's own classes run.

Pinned to torch's ``pipeline_order`` as its schedule visualizer builds it (torch installed, the
``torch`` extra). Ops of torch's actions are parsed with our strict parser; REDUCE_GRAD and the
idle slots (None) carry no compute. Overlapped F&B actions of DualPipeV are compared as the
forward then the backward, the sequential form our ``dualpipev`` emits without an overlap
factor.
"""

from __future__ import annotations

import pytest

from zbsolve.baselines import NAMES, NotApplicable, generate
from zbsolve.instance import load_instance
from zbsolve.ops import ops_of, parse_op
from zbsolve.simulate import simulate

pytestmark = pytest.mark.torch

CASES = [(2, 3), (2, 4), (3, 5), (3, 6), (4, 4), (4, 6), (4, 8)]


def _inst(p, m, v, placement):
    return load_instance({"devices": p, "microbatches": m, "chunks": v, "placement": placement,
                          "times": {"F": 1, "I": 1, "W": 1}})


def torch_order(schedule: str, p: int, m: int, v: int) -> list[list]:
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    rows = []
    for actions in get_schedule_ops(schedule, p, m, num_stages_per_rank=v):
        row = []
        for action in actions:
            if action is None or "REDUCE_GRAD" in str(action):
                continue
            text = str(action)
            if text.startswith("("):  # (0F7;7B3)OVERLAP_F_B: forward, then backward
                row += [parse_op(t) for t in text[1:text.index(")")].split(";")]
            else:
                row.append(parse_op(text))
        rows.append(row)
    return rows


@pytest.mark.parametrize("ours, theirs, placement, chunks", [
    ("torch-interleaved-1f1b", "Interleaved1F1B", "loop", (2, 3)),
    ("torch-looped-bfs", "LoopedBFS", "loop", (2, 3)),
    ("torch-interleaved-zb", "InterleavedZeroBubble", "loop", (2, 3)),
    ("torch-zbv", "ZBVZeroBubble", "v", (2,)),
])
def test_torch_families_reproduce_torchs_pipeline_order(ours, theirs, placement, chunks):
    compared = 0
    for p, m in CASES:
        for v in chunks:
            try:
                expected = torch_order(theirs, p, m, v)
            except ValueError:  # torch refuses the setting (e.g. m not a multiple of rounds)
                with pytest.raises(NotApplicable):
                    generate(ours, _inst(p, m, v, placement))
                continue
            inst = _inst(p, m, v, placement)
            sched = generate(ours, inst)
            assert [list(r) for r in sched.orders] == expected, (ours, p, m, v)
            simulate(inst, sched)  # complete and deadlock-free
            compared += 1
    assert compared >= 5


def test_1f1b_is_what_torchs_schedule1f1b_runtime_executes():
    # torch's pipeline_order numbers the last rank's forwards 1..m, its runtime runs 0..m-1
    # (the _step_microbatches loop counts from 0): pin to what runs.
    for p, m in [(2, 4), (3, 3), (4, 8), (4, 10)]:
        listed = torch_order("1F1B", p, m, 1)
        assert [op.mb for op in listed[-1] if op.kind == "F"] == list(range(1, m + 1))
        runs = [r if d < p - 1 else [op._replace(mb=op.mb - 1) if op.kind == "F" else op
                                      for op in r] for d, r in enumerate(listed)]
        ours = generate("1f1b", _inst(p, m, 1, "loop"))
        assert [list(r) for r in ours.orders] == runs


def test_dualpipev_is_torchs_schedule_dualpipev():
    for p, m in [(2, 4), (3, 6), (4, 8), (4, 10)]:
        ours = generate("dualpipev", _inst(p, m, 2, "v"))
        flat = [[op for e in row for op in ops_of(e)] for row in ours.orders]
        assert flat == torch_order("DualPipeV", p, m, 2)


def test_torch_families_are_registered_and_refuse_other_placements():
    assert {"torch-interleaved-1f1b", "torch-looped-bfs", "torch-interleaved-zb",
            "torch-zbv"} <= set(NAMES)
    with pytest.raises(NotApplicable, match="loop placement"):
        generate("torch-interleaved-zb", _inst(2, 4, 2, "v"))
    with pytest.raises(NotApplicable, match="V placement"):
        generate("torch-zbv", _inst(2, 4, 2, "loop"))
    with pytest.raises(NotApplicable, match="chunks >= 2"):
        generate("torch-interleaved-1f1b", _inst(2, 4, 1, "loop"))
