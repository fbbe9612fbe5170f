"""The runner's table check (runtime/runner.py check_table) and the judge behind it: a table is
refused before anything runs for everything it can get wrong, each with its exact reason."""

from __future__ import annotations

import copy
import re

import pytest

pytest.importorskip("torch")

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.executor import ExecutorTable, lower  # noqa: E402
from zbsolve.export.judge import judge_table  # noqa: E402
from zbsolve.instance import load_instance  # noqa: E402
from zbsolve.runtime.model import GPTConfig  # noqa: E402
from zbsolve.runtime.runner import TableMismatch, check_table  # noqa: E402

CFG = GPTConfig.preset("gpt-tiny", layers=4, hidden=32, heads=4, seq=16, vocab=64)


def _inst(limit=None, p=2, m=4):
    return load_instance({"name": f"t-p{p}", "devices": p, "microbatches": m,
                          "times": {"F": 1, "I": 1, "W": 1}, "comm": 0.5,
                          "memory": {"activation": 1, "weight": 0.5, "limit": limit}})


def _table(name="1f1b", **kw) -> ExecutorTable:
    inst = _inst(**kw)
    return lower(inst, generate(name, inst))


def _edit(table: ExecutorTable, fn) -> ExecutorTable:
    data = copy.deepcopy(table.to_dict())
    fn(data)
    return ExecutorTable.from_dict(data)


def _index(data, rank, kind, n=0):
    acts = data["ranks"][rank]["actions"]
    return [i for i, a in enumerate(acts) if a["kind"] == kind][n]


def _refused(table, world=2, cfg=CFG, **kw) -> str:
    with pytest.raises(TableMismatch) as err:
        check_table(table, world, cfg, **kw)
    return str(err.value)


def test_a_good_table_passes():
    table = _table()
    check_table(table, 2, CFG)
    verdict = judge_table(table)
    assert verdict.ok and [r.mode for r in verdict.reports] == ["blocking", "batched"]
    assert all(r.transfers == 2 * 4 for r in verdict.reports)


def test_send_without_its_recv():
    table = _edit(_table(), lambda d: d["ranks"][1]["actions"].pop(_index(d, 1, "RECV_F")))
    msg = _refused(table)
    assert msg.startswith(
        "table '1f1b' cannot run: p2p: rank 1 position 0 (1F0): needs 1RECV_F0 from rank 0 "
        "but the rank has no such RECV")
    assert re.search(r"no such RECV \(and \d+ more problems\)$", msg), msg  # no memory hint


def test_recv_after_its_consumer():
    def move(d):
        acts = d["ranks"][1]["actions"]
        recv = acts.pop(_index(d, 1, "RECV_F"))
        acts.insert(1, recv)  # after 1F0

    msg = _refused(_edit(_table(), move))
    assert "p2p: rank 1 position 0 (1F0): its RECV is at position 1, after it" in msg


def test_wrong_and_out_of_range_peer_and_same_rank():
    def peer(value):
        return lambda d: d["ranks"][0]["actions"][_index(d, 0, "SEND_F")].update(peer=value)

    assert ("p2p: rank 0 position 1 (0SEND_F0): peer should be stage 1 on rank 1, table says "
            "stage 1 on rank 0") in _refused(_edit(_table(), peer(0)))
    assert "table says stage 1 on rank 7" in _refused(_edit(_table(), peer(7)))


def test_duplicated_transfer():
    def dup(d):
        acts = d["ranks"][0]["actions"]
        i = _index(d, 0, "SEND_F")
        acts.insert(i + 1, dict(acts[i]))

    assert "p2p: rank 0 position 2 (0SEND_F0): duplicate of rank 0 position 1" in _refused(
        _edit(_table(), dup))


def test_comm_action_on_the_wrong_rank():
    def move(d):
        send = d["ranks"][0]["actions"].pop(_index(d, 0, "SEND_F"))
        d["ranks"][1]["actions"].insert(0, send)

    assert "p2p: rank 1 position 0 (0SEND_F0): stage 0 lives on rank 0" in _refused(
        _edit(_table(), move))


def test_deadlock_in_blocking_mode():
    inst = _inst(p=4, m=8)
    table = lower(inst, generate("1f1b", inst), placement="adjacent")
    msg = _refused(table, world=4)
    assert "cannot run: p2p blocking deadlock: rank 0 stuck at position" in msg
    verdict = judge_table(table)
    assert {r.mode for r in verdict.reports if r.stuck} >= {"blocking"}


def test_header_and_embedded_instance_against_the_table():
    table = _table()
    other = _edit(table, lambda d: d["instance"].update(placement=[1, 0]))
    assert _refused(other).startswith(
        "table '1f1b' cannot run: placement [0, 1] differs from the embedded instance's [1, 0]")
    broken = _edit(table, lambda d: d["instance"].update(devices=0))
    assert "cannot run: embedded instance: devices: expected an integer >= 1, got 0" in _refused(broken)
    from zbsolve.solver.api import split_backward

    inst = _inst()
    split = lower(inst, split_backward(generate("1f1b", inst)))  # every I right before its W
    fused = _edit(split, lambda d: d.update(fused_bw=True))
    assert _refused(fused).startswith(
        "table '1f1b+split' cannot run: fused_bw is true but rank 0 runs 0I0 right before 0W0")


def test_compute_order_is_judged_by_the_simulator():
    def drop(d):
        acts = d["ranks"][0]["actions"]
        acts.pop(next(i for i, a in enumerate(acts) if (a["kind"], a["mb"]) == ("F", 3)))

    assert "cannot run: compute order: 1 missing op(s): 0F3" in _refused(_edit(_table(), drop))


def test_memory_over_its_own_limit_needs_the_flag():
    # 1F1B at p=2 keeps 2 activations on rank 0; the embedded instance allows 1.5
    table = _edit(_table(), lambda d: d["instance"]["memory"].update(limit=1.5))
    msg = _refused(table)
    assert msg.startswith("table '1f1b' cannot run: memory: device 0 exceeds its memory limit 1.5")
    assert msg.endswith("(run it anyway with --allow-over-memory)")
    check_table(table, 2, CFG, allow_over_memory=True)


def test_launch_mismatches():
    table = _table()
    assert _refused(table, world=3).startswith(
        "table '1f1b' is for 2 ranks but the launch has world size 3: use --nproc 2")
    assert "--layers 2" in _refused(table, cfg=CFG.with_(layers=1))


# ------------------------------------------------- refusals of the launch's engine and model
MODE_FIELDS = {"recompute": {"R": 1, "kept": 0.1}, "offload": {"d2h": 1.0}}


def _mode_table(name: str) -> ExecutorTable:
    inst = load_instance({"name": "modes", "devices": 2, "microbatches": 4,
                          "times": {"F": 1, "I": 1, "W": 1}, "comm": 0.5,
                          "memory": {"activation": 1, "weight": 0.5}, **MODE_FIELDS})
    return lower(inst, generate(name, inst))


def test_memory_modes_run_on_our_engine_only_with_the_kinds_named_in_order():
    table = _mode_table("1f1b-offload")
    check_table(table, 2, CFG)  # ours runs O and L
    assert _refused(table, engine="torch") == (
        "engine torch: torch's pipelining runtime has no recompute / offload actions (L, O in "
        "table '1f1b-offload'); run it with --engine ours")
    check_table(_mode_table("1f1b-recompute"), 2, CFG)
    assert "(R in table '1f1b-recompute')" in _refused(_mode_table("1f1b-recompute"),
                                                       engine="torch")


def test_selective_recompute_is_refused_first_on_either_engine():
    from zbsolve.runtime.stage_modes import SELECTIVE_REFUSAL

    def selective(d):
        acts = d["ranks"][0]["actions"]
        acts[_index(d, 0, "R")]["kind"] = "RS"

    table = _edit(_mode_table("1f1b-recompute"), selective)
    want = f"table '1f1b-recompute' uses {SELECTIVE_REFUSAL}"
    assert _refused(table) == want
    assert _refused(table, engine="torch") == want  # before the engine's refusal of modes
    assert _refused(table, world=3) == want  # before judging or the world size


def test_plain_tables_run_on_torch_and_only_replicas_and_segments_are_refused_there():
    check_table(_table(), 2, CFG, "torch")  # one replica, one segment: torch's runtime runs it
    rep = load_instance({"name": "rep", "devices": 2, "microbatches": 4, "replicas": 2,
                         "times": {"F": 1, "I": 1, "W": 1}, "comm": 0.1, "sync": 0.5})
    table = lower(rep, generate("chimera", rep))
    check_table(table, 2, CFG)
    assert _refused(table, engine="torch") == (
        "table 'chimera' runs 2 model replicas: torch's pipelining runtime has one last stage "
        "and cannot run them; use --engine ours")
    seg = load_instance({"name": "seg", "devices": 2, "microbatches": 2, "segments": 2,
                         "segment_lengths": "balanced", "segment_costs": "prefix",
                         "segment_model": {"seq": 16, "hidden": 32, "heads": 4, "layers": 1,
                                           "vocab": 64},
                         "times": {"F": 1, "I": 1, "W": 1}, "comm": 0.05})
    table = lower(seg, generate("seq1f1b", seg))
    check_table(table, 2, CFG)
    assert _refused(table, engine="torch") == (
        "engine torch: torch's pipelining runtime has no sequence segments; run segmented "
        "tables with --engine ours")
    llama = {"kind": "hf", "model_type": "llama", "layers": 2, "hidden": 32, "heads": 4,
             "seq": 16, "vocab": 64}
    assert _refused(table, cfg=llama).startswith(
        "table 'seq1f1b': the table splits microbatches into 2 sequence segments; only the "
        "runner's GPT runs segments")


def test_model_given_as_a_dict_is_split_the_same_way():
    table = _table()
    check_table(table, 2, CFG.to_dict())  # a GPTConfig's fields
    check_table(table, 2, {"kind": "gpt", "layers": 2, "hidden": 32, "heads": 4, "seq": 16,
                           "vocab": 64})  # the layered runner's spec
    few = ("the model has 1 layers but the table has 2 logical stages; every stage needs at "
           "least one layer: pass --layers 2 or more")
    assert _refused(table, cfg=CFG.with_(layers=1).to_dict()) == few
    assert _refused(table, cfg=CFG.with_(layers=1)) == few
    assert _refused(table, cfg={"kind": "gpt", "layers": 1, "hidden": 32, "heads": 4, "seq": 16,
                                "vocab": 64}) == (
        "the model has 1 layers between its first and last, too few for 2 stages (each needs "
        "one): use more layers (--layers 2), fewer stages, or an explicit --split")
