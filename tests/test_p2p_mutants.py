"""Behaviour tests that kill the P2P checker's mutants (results/mutation/README.md, part 2):
each static error kind with its exact message, and the matching simulation in both modes on
hand-made tables (``check(..., static=[])`` runs the matching alone)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import make_instance

from zbsolve.baselines import generate
from zbsolve.export.executor import Action, ExecutorTable, lower
from zbsolve.export.p2p_check import P2PError, P2PReport, check, require_safe, static_errors
from zbsolve.instance import load_instance

INST = make_instance(p=2, m=2, comm=0.5)
# rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
# rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1
GOOD = lower(INST, generate("1f1b", INST))


def _table(rows=None, placement=None, instance=None) -> ExecutorTable:
    return dataclasses.replace(
        GOOD, actions=[list(r) for r in (GOOD.actions if rows is None else rows)],
        placement=list(GOOD.placement if placement is None else placement),
        instance=dict(GOOD.instance if instance is None else instance))


def _rows():
    return [list(r) for r in GOOD.actions]


def _find(row, token):
    return next(i for i, a in enumerate(row) if a.token == token)


def _edit(rank, token, **fields):
    rows = _rows()
    i = _find(rows[rank], token)
    rows[rank][i] = dataclasses.replace(rows[rank][i], **fields)
    return _table(rows)


def _comm(kind, stage, mb, peer, peer_stage, batch):
    return Action(kind, stage, mb, 0.0, 0.0, peer=peer, peer_stage=peer_stage, batch=batch)


def test_a_good_table_passes_both_modes_with_every_transfer_counted():
    assert static_errors(GOOD) == []
    reports = require_safe(GOOD)
    assert [(r.mode, r.ok, r.transfers, r.errors, r.stuck) for r in reports] == [
        ("blocking", True, 4, [], []), ("batched", True, 4, [], [])]
    assert [str(r) for r in reports] == ["p2p blocking: ok (4 transfers matched)",
                                         "p2p batched: ok (4 transfers matched)"]
    assert [r.mode for r in require_safe(GOOD, ("batched",))] == ["batched"]


def test_three_ranks_match_on_their_own_channels():
    inst = make_instance(p=3, m=3, comm=0.5)
    for name in ("1f1b", "zb-h1"):
        table = lower(inst, generate(name, inst))
        assert [(r.transfers, r.ok) for r in require_safe(table)] == [(12, True)] * 2


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError) as err:
        check(GOOD, "eager")
    assert str(err.value) == "mode: expected one of ('blocking', 'batched'), got 'eager'"


def test_given_static_errors_are_reported_without_matching():
    report = check(GOOD, "blocking", static=["x"])
    assert (report.errors, report.stuck, report.transfers, report.ok) == (["x"], [], 0, False)
    report = check(GOOD, "batched", static=["y"])
    assert (report.errors, report.transfers) == (["y"], 0)


def test_require_safe_names_every_failed_mode():
    with pytest.raises(P2PError) as err:
        require_safe(_edit(0, "0SEND_F0", peer_stage=0))
    wrong = ("rank 0 position 1 (0SEND_F0): peer should be stage 1 on rank 1, table says stage 0 "
             "on rank 1")
    assert str(err.value) == (
        "executor table failed the P2P check:\n"
        f"p2p blocking: FAILED\n  error: {wrong}\n"
        f"p2p batched: FAILED\n  error: {wrong}")


def test_report_text_lists_twenty_errors_then_the_deadlock():
    report = P2PReport("batched", errors=[f"e{i}" for i in range(25)], stuck=["s0", "s1"])
    assert str(report) == "\n".join(
        ["p2p batched: FAILED"] + [f"  error: e{i}" for i in range(20)]
        + ["  deadlock:", "    s0", "    s1"])
    assert not P2PReport("blocking", stuck=["s"]).ok
    assert str(P2PReport("blocking", stuck=["s"])) == "p2p blocking: FAILED\n  deadlock:\n    s"


BATCH = "(one batch per run of consecutive communication actions)"
RANGE = "stage/microbatch out of range (stages 0..1, microbatches 0..1)"


def _drop(rank, token):
    rows = _rows()
    del rows[rank][_find(rows[rank], token)]
    return _table(rows)


def _move_first(rank, token):
    rows = _rows()
    rows[rank].insert(0, rows[rank].pop(_find(rows[rank], token)))
    return _table(rows)


def _to_rank_0(token):
    rows = _rows()
    rows[0].insert(0, rows[1].pop(_find(rows[1], token)))
    return _table(rows)


def _extra_recv():
    rows = _rows()
    rows[1].append(_comm("RECV_F", 1, 1, 0, 0, 4))
    return _table(rows)


def _w_before_i():
    zb = lower(INST, generate("zb-h1", INST))
    rows = [list(r) for r in zb.actions]  # rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0I0 0W0 ...
    rows[0].insert(_find(rows[0], "0I0"), rows[0].pop(_find(rows[0], "0W0")))
    return dataclasses.replace(zb, actions=rows)


STATIC = {
    "placement past the last rank": (lambda: _table(placement=[0, 2]),
                                     ["placement [0, 2] names a rank outside 0..1"]),
    "negative placement": (lambda: _table(placement=[-1, 1]),
                           ["placement [-1, 1] names a rank outside 0..1"]),
    "stage past the last": (lambda: _edit(0, "0F0", stage=2), [f"rank 0 position 0 (2F0): {RANGE}"]),
    "negative stage": (lambda: _edit(0, "0F0", stage=-1), [f"rank 0 position 0 (-1F0): {RANGE}"]),
    "microbatch past the last": (lambda: _edit(0, "0F0", mb=2), [f"rank 0 position 0 (0F2): {RANGE}"]),
    "negative microbatch": (lambda: _edit(0, "0F0", mb=-1), [f"rank 0 position 0 (0F-1): {RANGE}"]),
    "compute on the wrong rank, batch errors after it": (lambda: _to_rank_0("1F0"), [
        "rank 0 position 0 (1F0): stage 1 lives on rank 1",
        f"rank 1 position 1 (1RECV_F1): batch 1, expected 0 {BATCH}",
        f"rank 1 position 3 (1SEND_B0): batch 2, expected 1 {BATCH}",
        f"rank 1 position 6 (1SEND_B1): batch 3, expected 2 {BATCH}"]),
    "end before start": (lambda: _edit(0, "0F0", end=-1.0),
                         ["rank 0 position 0 (0F0): end -1.0 before start 0.0"]),
    "a zero-length action is fine": (lambda: _edit(0, "0F0", end=0.0), []),
    "duplicate comm": (_extra_recv, [
        "rank 1 position 8 (1RECV_F1): duplicate of rank 1 position 2",
        f"rank 1 position 8 (1RECV_F1): batch 4, expected 3 {BATCH}"]),
    "wrong batch number": (lambda: _edit(0, "0SEND_F0", batch=1),
                           [f"rank 0 position 1 (0SEND_F0): batch 1, expected 0 {BATCH}"]),
    "invalid embedded instance": (
        lambda: _table(instance={**GOOD.instance, "times": {"F": -1, "I": 1, "W": 1}}),
        ["the table's embedded instance is invalid: times.F[0]: must be > 0, got -1.0"]),
    "placement differs from the instance's": (
        lambda: _table(rows=[GOOD.actions[1], GOOD.actions[0]], placement=[1, 0]),
        ["placement [1, 0] differs from its embedded instance's [0, 1]"]),
    "input never computed": (lambda: _drop(0, "0F1"), [
        "rank 1 position 5 (1F1): its input 0F1 is never computed",
        "rank 0 position 2 (0SEND_F1): no matching producer/consumer/peer action",
        "rank 1 position 2 (1RECV_F1): no matching producer/consumer/peer action",
        f"rank 0 position 2 (0SEND_F1): batch 1, expected 0 {BATCH}",
        f"rank 0 position 3 (0RECV_B0): batch 1, expected 0 {BATCH}",
        f"rank 0 position 5 (0RECV_B1): batch 2, expected 1 {BATCH}"]),
    "same-rank input later": (_w_before_i, [
        "rank 0 position 5 (0W0): runs before 0I0 at position 6 on the same rank"]),
    "RECV after its consumer": (lambda: _move_first(0, "0B0"), [
        "rank 0 position 0 (0B0): its RECV is at position 5, after it",
        f"rank 0 position 6 (0RECV_B1): batch 2, expected 1 {BATCH}"]),
    "no RECV": (lambda: _drop(1, "1RECV_F0"), [
        "rank 1 position 0 (1F0): needs 1RECV_F0 from rank 0 but the rank has no such RECV",
        f"rank 1 position 1 (1RECV_F1): batch 1, expected 0 {BATCH}",
        f"rank 1 position 3 (1SEND_B0): batch 2, expected 1 {BATCH}",
        f"rank 1 position 6 (1SEND_B1): batch 3, expected 2 {BATCH}"]),
    "no SEND": (lambda: _drop(0, "0SEND_F0"), [
        "rank 1 position 1 (1F0): rank 0 never sends 0F0's output",
        f"rank 0 position 2 (0SEND_F1): batch 1, expected 0 {BATCH}",
        f"rank 0 position 3 (0RECV_B0): batch 1, expected 0 {BATCH}",
        f"rank 0 position 5 (0RECV_B1): batch 2, expected 1 {BATCH}"]),
    "SEND before its producer": (lambda: _move_first(0, "0SEND_F0"), [
        "rank 0 position 0: sends 0F0's output before computing it (position 1)"]),
    "wrong peer stage": (lambda: _edit(0, "0SEND_F0", peer_stage=0), [
        "rank 0 position 1 (0SEND_F0): peer should be stage 1 on rank 1, table says stage 0 on "
        "rank 1"]),
    "wrong peer rank": (lambda: _edit(1, "1RECV_F0", peer=1), [
        "rank 1 position 0 (1RECV_F0): peer should be stage 0 on rank 0, table says stage 0 on "
        "rank 1"]),
    "wrong peer of a backward hand-off": (lambda: _edit(1, "1SEND_B0", peer_stage=1), [
        "rank 1 position 4 (1SEND_B0): peer should be stage 0 on rank 0, table says stage 1 on "
        "rank 0"]),
}


@pytest.mark.parametrize("case", list(STATIC))
def test_static_errors_exact(case):
    make, expected = STATIC[case]
    table = make()
    assert static_errors(table) == expected
    report = check(table, "batched")
    assert report.errors == expected and report.stuck == [] and report.ok == (not expected)


# ---------------------------------------------------------------- the matching, on its own
def _rows_of(*ranks):
    """Hand-made comm-only programs: (kind, stage, mb, peer, peer_stage, batch) per action."""
    return _table(rows=[[_comm(*a) for a in row] for row in ranks], placement=[0, 1, 2][:len(ranks)])


def test_blocking_deadlock_of_the_adjacent_rule_names_both_ranks():
    table = lower(INST, generate("1f1b", INST), placement="adjacent")
    assert static_errors(table) == []
    report = check(table, "blocking")
    assert report.errors == [] and report.transfers == 1
    assert report.stuck == [
        "rank 0 stuck at position 3: 0SEND_F1 (send to rank 1); rank 1 is at position 3 (1SEND_B0)",
        "rank 1 stuck at position 3: 1SEND_B0 (send to rank 0); rank 0 is at position 3 (0SEND_F1)"]
    assert str(report) == "\n".join(["p2p blocking: FAILED", "  deadlock:"]
                                    + [f"    {s}" for s in report.stuck])
    batched = check(table, "batched")
    assert (batched.ok, batched.transfers) == (True, 4)


def test_blocking_names_a_peer_that_has_finished_and_a_receive():
    table = _rows_of([("SEND_F", 0, 0, 1, 1, 0)], [])
    assert check(table, "blocking", static=[]).stuck == [
        "rank 0 stuck at position 0: 0SEND_F0 (send to rank 1); rank 1 has finished"]
    table = _rows_of([], [("RECV_F", 1, 0, 0, 0, 0)])
    assert check(table, "blocking", static=[]).stuck == [
        "rank 1 stuck at position 0: 1RECV_F0 (receive from rank 0); rank 0 has finished"]


def test_blocking_send_waits_for_a_receive_from_itself_not_another_rank():
    """Rank 2 is at a RECV from rank 0; rank 1's SEND to rank 2 must not match it."""
    table = _rows_of([("RECV_B", 0, 0, 1, 1, 0), ("SEND_F", 0, 0, 2, 2, 0)],
                     [("SEND_F", 1, 0, 2, 2, 0), ("SEND_B", 1, 0, 0, 0, 0)],
                     [("RECV_F", 2, 0, 0, 0, 0), ("RECV_F", 2, 0, 1, 1, 0)])
    report = check(table, "blocking", static=[])
    assert (report.transfers, report.errors) == (0, [])
    assert report.stuck == [
        "rank 0 stuck at position 0: 0RECV_B0 (receive from rank 1); rank 1 is at position 0 "
        "(1SEND_F0)",
        "rank 1 stuck at position 0: 1SEND_F0 (send to rank 2); rank 2 is at position 0 "
        "(2RECV_F0)",
        "rank 2 stuck at position 0: 2RECV_F0 (receive from rank 0); rank 0 is at position 0 "
        "(0RECV_B0)"]


def test_blocking_matches_fifo_and_skips_compute_after_each_transfer():
    rows = [[_comm("SEND_F", 0, 0, 1, 1, 0), GOOD.actions[0][0], _comm("SEND_F", 0, 1, 1, 1, 1)],
            [_comm("RECV_F", 1, 0, 0, 0, 0), GOOD.actions[1][1], _comm("RECV_F", 1, 1, 0, 0, 1)]]
    report = check(_table(rows=rows), "blocking", static=[])
    assert (report.ok, report.transfers) == (True, 2)
    report = check(_table(rows=rows), "batched", static=[])
    assert (report.ok, report.transfers) == (True, 2)


def test_blocking_mismatch_stops_at_the_wrong_tensor():
    table = _rows_of([("SEND_F", 0, 1, 1, 1, 0), ("SEND_F", 0, 0, 1, 1, 0)],
                     [("RECV_F", 1, 0, 0, 0, 0), ("RECV_F", 1, 1, 0, 0, 0)])
    report = check(table, "blocking", static=[])
    assert report.errors == ["mismatch: rank 0 sends 0SEND_F1 while rank 1 expects 1RECV_F0 "
                             "(FIFO matching would deliver the wrong tensor)"]
    assert (report.stuck, report.transfers) == ([], 0)
    report = check(table, "batched", static=[])
    assert report.errors == ["mismatch on channel rank 0 -> rank 1: send #0 is 0SEND_F1 but "
                             "receive #0 is 1RECV_F0"]
    assert (report.stuck, report.transfers) == ([], 0)


def test_batched_mismatch_after_a_good_transfer_counts_it():
    table = _rows_of([("SEND_F", 0, 0, 1, 1, 0), ("SEND_F", 0, 1, 1, 1, 0)],
                     [("RECV_F", 1, 0, 0, 0, 0), ("RECV_F", 1, 0, 0, 0, 0)])
    report = check(table, "batched", static=[])
    assert report.errors == ["mismatch on channel rank 0 -> rank 1: send #1 is 0SEND_F1 but "
                             "receive #1 is 1RECV_F0"]
    assert report.transfers == 1
    report = check(table, "blocking", static=[])
    assert report.errors == ["mismatch: rank 0 sends 0SEND_F1 while rank 1 expects 1RECV_F0 "
                             "(FIFO matching would deliver the wrong tensor)"]
    assert report.transfers == 1


def test_batched_deadlock_lists_the_unmatched_ops_of_each_batch():
    """Each rank's first batch waits for what the other posts only in its second."""
    table = _rows_of(
        [("SEND_B", 0, 1, 1, 1, 0), ("RECV_B", 0, 0, 1, 1, 0), ("SEND_F", 0, 0, 1, 1, 1)],
        [("RECV_B", 1, 1, 0, 0, 0), ("RECV_F", 1, 0, 0, 0, 0), ("SEND_B", 1, 0, 0, 0, 1)])
    report = check(table, "batched", static=[])
    assert report.errors == [] and report.transfers == 1
    assert report.stuck == [
        "rank 0 stuck in batch 0 (positions 0..1), unmatched: 0RECV_B0 (from rank 1)",
        "rank 1 stuck in batch 0 (positions 0..1), unmatched: 1RECV_F0 (from rank 0)"]


def test_batched_posts_a_whole_run_so_a_swap_inside_it_is_fine():
    """Blocking deadlocks on two SENDs facing each other; one batch each matches them."""
    table = _rows_of([("SEND_F", 0, 0, 1, 1, 0), ("RECV_B", 0, 0, 1, 1, 0)],
                     [("SEND_B", 1, 0, 0, 0, 0), ("RECV_F", 1, 0, 0, 0, 0)])
    assert check(table, "batched", static=[]).ok
    assert check(table, "batched", static=[]).transfers == 2
    blocking = check(table, "blocking", static=[])
    assert blocking.transfers == 0 and len(blocking.stuck) == 2


def test_batched_runs_later_batches_after_compute():
    table = lower(make_instance(p=3, m=4, comm=0.5), generate("zb-h1", make_instance(p=3, m=4, comm=0.5)))
    counts = [sum(a.is_comm for a in row) for row in table.actions]
    report = check(table, "batched")
    assert report.ok and 2 * report.transfers == sum(counts)


# ---------------------------------------------------------------- pairs and segments
def test_overlapped_pairs_count_both_ops():
    inst = load_instance({"devices": 2, "microbatches": 4, "chunks": 2, "placement": "v",
                          "times": {"F": 1, "I": 1, "W": 1}, "overlap": {"FB": 0.75}})
    table = lower(inst, generate("dualpipev", inst))
    assert [r.transfers for r in require_safe(table)] == [16, 16]
    rows = [list(r) for r in table.actions]
    assert rows[0][13].token == "(0F3;3B1)OVERLAP_F_B"
    rows[0].append(dataclasses.replace(rows[0][0], mb=3))  # 0F3 again, after the pair
    assert static_errors(dataclasses.replace(table, actions=rows)) == [
        "rank 0 position 32 (0F3): duplicate of rank 0 position 13"]


def test_segments_are_separate_messages():
    """A missing segment RECV is named with its segment (1RECV_F0.1, not 1RECV_F0)."""
    inst = load_instance(dict(devices=2, microbatches=2, segments=2, comm=0.5,
                              times=dict(F=1, I=1, W=1)))
    table = lower(inst, generate("seq1f1b", inst))
    assert [r.transfers for r in require_safe(table)] == [8, 8]
    rows = [list(r) for r in table.actions]
    del rows[1][_find(rows[1], "1RECV_F0.1")]
    assert static_errors(dataclasses.replace(table, actions=rows)) == [
        "rank 1 position 3 (1F0.1): needs 1RECV_F0.1 from rank 0 but the rank has no such RECV"]


def test_blocking_keeps_scanning_past_finished_and_receiving_ranks():
    """A finished rank 0, or rank 0 waiting at a RECV, must not stop the scan of the ranks after it."""
    finished_first = _rows_of([], [("SEND_F", 1, 0, 2, 2, 0)], [("RECV_F", 2, 0, 1, 1, 0)])
    receiving_first = _rows_of([("RECV_B", 0, 0, 1, 1, 0)], [("SEND_B", 1, 0, 0, 0, 0)])
    peer_finished = _rows_of([("SEND_F", 0, 0, 1, 1, 0)], [], [("SEND_F", 2, 0, 0, 0, 0)])
    for table in (finished_first, receiving_first):
        report = check(table, "blocking", static=[])
        assert (report.ok, report.transfers) == (True, 1)
    report = check(peer_finished, "blocking", static=[])
    assert report.stuck == [
        "rank 0 stuck at position 0: 0SEND_F0 (send to rank 1); rank 1 has finished",
        "rank 2 stuck at position 0: 2SEND_F0 (send to rank 0); rank 0 is at position 0 (0SEND_F0)"]


def test_check_defaults_to_blocking():
    assert check(GOOD).mode == "blocking" and check(GOOD).transfers == 4


def test_no_send_names_the_producers_rank():
    assert static_errors(_drop(0, "0SEND_F1"))[0] == "rank 1 position 5 (1F1): rank 0 never sends 0F1's output"


def test_out_of_range_actions_are_all_named():
    rows = _rows()
    rows[0][0] = dataclasses.replace(rows[0][0], stage=2)
    rows[0][2] = dataclasses.replace(rows[0][2], mb=2)
    assert static_errors(_table(rows))[:2] == [f"rank 0 position 0 (2F0): {RANGE}",
                                           f"rank 0 position 2 (0F2): {RANGE}"]


def test_batched_stuck_line_lists_every_unmatched_op_of_a_later_batch():
    """Rank 0's batch 1 (positions 1..4) has four ops; rank 1 sends 1SEND_B0, which matches
    0RECV_B0, and finishes: the other three, two sends and a receive, stay unmatched."""
    table = _rows_of(
        [("SEND_F", 0, 0, 1, 1, 0), ("SEND_F", 0, 1, 1, 1, 1), ("RECV_B", 0, 0, 1, 1, 1),
         ("RECV_B", 0, 1, 1, 1, 1), ("SEND_F", 0, 2, 1, 1, 1)],
        [("RECV_F", 1, 0, 0, 0, 0), ("SEND_B", 1, 0, 0, 0, 1)])
    report = check(table, "batched", static=[])
    assert (report.errors, report.transfers) == ([], 2)
    assert report.stuck == [
        "rank 0 stuck in batch 1 (positions 1..4), unmatched: 0SEND_F1 (to rank 1), "
        "0RECV_B1 (from rank 1), 0SEND_F2 (to rank 1)"]


def test_batched_stuck_line_of_a_one_op_batch():
    report = check(_rows_of([("SEND_F", 0, 0, 1, 1, 0)], []), "batched", static=[])
    assert (report.transfers, report.stuck) == (
        0, ["rank 0 stuck in batch 0 (positions 0..0), unmatched: 0SEND_F0 (to rank 1)"])


SEGMENTED = dict(devices=2, microbatches=2, segments=2, comm=0.5, times=dict(F=1, I=1, W=1))
# rank 0: 0F0 0SEND_F0 0F0.1 0SEND_F0.1 0F1 0SEND_F1 0RECV_B0.1 0B0.1 0RECV_B0 0F1.1 ...
# rank 1: 1RECV_F0 1RECV_F0.1 1F0 1RECV_F1 1F0.1 1B0.1 1SEND_B0.1 1F1 1B0 1SEND_B0 ...


def _segmented_rows():
    inst = load_instance(SEGMENTED)
    table = lower(inst, generate("seq1f1b", inst))
    return table, [list(r) for r in table.actions]


def _swap(row, a, b):
    i, j = _find(row, a), _find(row, b)
    row[i], row[j] = row[j], row[i]


def test_every_input_of_an_op_is_checked_after_a_missing_one():
    """1F0.1 has two inputs: 0F0.1 (dropped: never computed) and 1F0 (moved after it): both named."""
    table, rows = _segmented_rows()
    del rows[0][_find(rows[0], "0F0.1")]
    _swap(rows[1], "1F0", "1F0.1")
    errors = static_errors(dataclasses.replace(table, actions=rows))
    assert [e for e in errors if BATCH not in e] == [
        "rank 1 position 2 (1F0.1): its input 0F0.1 is never computed",
        "rank 1 position 2 (1F0.1): runs before 1F0 at position 4 on the same rank",
        "rank 0 position 2 (0SEND_F0.1): no matching producer/consumer/peer action",
        "rank 1 position 1 (1RECV_F0.1): no matching producer/consumer/peer action"]
    assert len(errors) == 4 + 7  # rank 0's batches after the dropped op, one each


def test_every_input_of_an_op_is_checked_after_a_same_rank_one():
    """1B0's inputs are 1F0 (same rank, in order) and 1B0.1 (same rank, moved after it)."""
    table, rows = _segmented_rows()
    _swap(rows[1], "1B0", "1B0.1")
    assert static_errors(dataclasses.replace(table, actions=rows)) == [
        "rank 1 position 6: sends 1B0.1's output before computing it (position 8)",
        "rank 1 position 5 (1B0): runs before 1B0.1 at position 8 on the same rank"]


def test_memory_mode_actions_are_compute_not_orphan_comms():
    """A recompute table: 0R0 (the recomputed forward) is a compute action of its rank; it
    needs no SEND/RECV. Without it the unit is a kept one (the table's ops say which mode a
    unit runs in): only the batch numbers, which counted 0R0 as a separator, are off."""
    from zbsolve.solver.bounds import serial_schedule

    inst = make_instance(p=2, m=2, comm=0.5, recompute={"R": 0.5, "kept": 0.25})
    table = lower(inst, serial_schedule(inst))
    assert " ".join(a.token for a in table.actions[0]) == (
        "0F0 0SEND_F0 0R0 0RECV_B0 0I0 0W0 0F1 0SEND_F1 0R1 0RECV_B1 0I1 0W1")
    assert static_errors(table) == []
    assert [(r.ok, r.transfers) for r in require_safe(table)] == [(True, 4), (True, 4)]
    rows = [list(r) for r in table.actions]
    del rows[0][_find(rows[0], "0R0")]
    assert static_errors(dataclasses.replace(table, actions=rows)) == [
        f"rank 0 position 2 (0RECV_B0): batch 1, expected 0 {BATCH}",
        f"rank 0 position 6 (0SEND_F1): batch 2, expected 1 {BATCH}",
        f"rank 0 position 8 (0RECV_B1): batch 3, expected 2 {BATCH}"]


def test_blocking_scan_goes_on_past_a_rank_whose_peer_has_finished():
    """Rank 0 sends to rank 1, which has nothing left; ranks 2 and 3 still match their pair."""
    rows = [[_comm("SEND_F", 0, 0, 1, 1, 0)], [],
            [_comm("SEND_F", 0, 0, 3, 1, 0)], [_comm("RECV_F", 1, 0, 2, 0, 0)]]
    report = check(_table(rows=rows, placement=[0, 1, 2, 3]), "blocking", static=[])
    assert report.transfers == 1
    assert report.stuck == [
        "rank 0 stuck at position 0: 0SEND_F0 (send to rank 1); rank 1 has finished"]
