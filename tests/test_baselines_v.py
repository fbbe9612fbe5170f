"""V-shape schedules (1F1B-V, ZB-V, V-Half, V-Min, DualPipeV) judged by the simulator.

Published numbers: zbsolve/data/reference/vshape_unit_cost.csv (unit cost) and
zbv_arxiv_bubble_rates.csv (profiled times per chunk); PyTorch's own DualPipeV order for
4 ranks / 10 microbatches (torch-artifacts/dualpipev_4rank_10mb.csv).

Bubble definition of vshape_unit_cost.csv: with the V-Min/V-Half/ZB-V schedules here every
device's span ends where the makespan does, and the table matches 1 - 6m/span (the ZB papers'
per-stage span) plus a constant ~0.0003 that the table's ZB-V column shows on its own (ZB-V
has no bubble at unit cost, yet is listed as 0.0003/0.0002).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from conftest import INSTANCES, REFERENCE, make_instance, moderate_floats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbsolve.baselines import NotApplicable, generate, zbv
from zbsolve.baselines.dualpipe import dualpipev
from zbsolve.baselines.vshape import block_offsets, block_peak, one_f_one_b_v, v_half, v_min, zb_v
from zbsolve.instance import load_instance
from zbsolve.ops import Op, parse_op
from zbsolve.schedule import Schedule
from zbsolve.simulate import simulate, validate
from zbsolve.solver.bounds import min_memory_limit

V_NAMES = ("1f1b-v", "zb-v", "v-half", "v-min", "dualpipev")


def _rows(name: str) -> list[dict[str, str]]:
    with open(REFERENCE / name) as fh:
        return list(csv.DictReader(fh))


UNIT_ROWS = _rows("vshape_unit_cost.csv")
ZBV_ROWS = _rows("zbv_arxiv_bubble_rates.csv")


def _unit_instance(row: dict[str, str]):
    return load_instance(INSTANCES / "vshape" / f"vshape-p{row['p']}-m{row['m']}.yaml")


# ---------------------------------------------------------------------- applicability
@pytest.mark.parametrize("name", V_NAMES)
def test_needs_two_chunks_in_v_placement(name):
    with pytest.raises(NotApplicable, match="chunks = 2"):
        generate(name, make_instance(p=4, m=8))
    with pytest.raises(NotApplicable, match="placement: v"):
        generate(name, make_instance(p=4, m=8, v=2, placement="loop"))


def test_dualpipev_needs_twice_as_many_microbatches_as_ranks():
    with pytest.raises(NotApplicable, match=r"microbatches >= 2 x ranks = 8, got 7"):
        dualpipev(make_instance(p=4, m=7, v=2, placement="v"))
    simulate(make_instance(p=4, m=8, v=2, placement="v"), dualpipev(
        make_instance(p=4, m=8, v=2, placement="v")))


# ---------------------------------------------------------------------- building blocks
@pytest.mark.parametrize("family", ["v-min", "v-half"])
def test_block_offsets_never_share_a_slot(family):
    for p in range(1, 65):
        for i in range(p):
            assert len({x % 6 for x in block_offsets(family, p, i)}) == 4, (family, p, i)


def test_block_offsets_and_peaks_as_published():
    assert block_offsets("v-min", 4, 1) == (1, 6, 9, 14)
    assert block_offsets("v-min", 6, 0) == (0, 11, 14, 25)  # d = 2 when p % 3 == 0
    assert block_offsets("v-half", 4, 0) == (0, 10, 14, 25)  # d = 3 when p is even
    assert [block_peak("v-min", p) for p in (4, 8, 16)] == [4, 8, 12]
    assert [block_peak("v-half", p) for p in (4, 8, 16)] == [6, 10, 18]


# ---------------------------------------------------------------------- unit-cost table
@pytest.mark.parametrize("row", UNIT_ROWS, ids=lambda r: f"p{r['p']}-m{r['m']}")
def test_v_min_and_v_half_match_the_published_table(row):
    inst = _unit_instance(row)
    for gen, col in ((v_min, "V-Min"), (v_half, "V-Half")):
        r = simulate(inst, gen(inst))
        assert max(r.peak_memory) == int(row[f"{col}_peak_chunk_acts"]), col
        assert r.bubble_span == pytest.approx(r.bubble_makespan)
        assert r.bubble_span == pytest.approx(float(row[col]), abs=0.01), col
        # measured: within 0.0015 on every row (rounding plus the table's ~0.0003 offset)
        assert r.bubble_span == pytest.approx(float(row[col]), abs=0.0015), col


def test_v_min_and_v_half_exact_idle_at_unit_cost():
    """Span - work: V-Min 4p-5, V-Half 3p-7 unit slots (the table's rows, p = 4, 8, 16)."""
    for p, m in ((4, 8), (8, 16), (16, 32)):
        inst = make_instance(p=p, m=m, v=2, placement="v")
        assert simulate(inst, v_min(inst)).max_span == 6 * m + 4 * p - 5
        assert simulate(inst, v_half(inst)).max_span == 6 * m + 3 * p - 7


@pytest.mark.parametrize("row", UNIT_ROWS, ids=lambda r: f"p{r['p']}-m{r['m']}")
def test_zb_v_has_no_bubble_at_unit_cost_and_the_1f1b_peak(row):
    inst = _unit_instance(row)
    r = simulate(inst, zb_v(inst))
    assert max(r.peak_memory) == int(row["ZB-V_peak_chunk_acts"]) == 2 * inst.p
    assert r.bubble_span == 0.0
    assert r.bubble_span == pytest.approx(float(row["ZB-V"]), abs=0.001)


def test_1f1b_v_peak_is_the_1f1b_peak_and_beats_1f1b():
    inst = make_instance(p=4, m=8, v=2, placement="v")
    r = simulate(inst, one_f_one_b_v(inst))
    assert r.peak_memory[0] == 8  # 2p chunk activations
    assert max(r.peak_memory) == 8
    assert r.makespan == 60  # 1F1B on the same model (stage = 2 chunks) ends at 66
    assert all(op.kind in "FB" for order in one_f_one_b_v(inst).orders for op in order)


# ---------------------------------------------------------------------- ZB paper (arXiv) rows
# The published ZB-V column comes from the authors' phased V construction (zbsolve/baselines/
# zbv.py rebuilds it). Measured with the simulator: within 0.0005 of the column on all 9 rows
# (results/vshape/bench_v.txt); the column's own per-row profiled times differ slightly from
# the rounded per-model times in the CSV, which is where the last digit goes.
def _arxiv_instance(row: dict[str, str]):
    return load_instance(
        INSTANCES / "zbv-arxiv" / f"zbv-{row['model'].lower()}-p{row['p']}-m{row['m']}.yaml")


@pytest.mark.parametrize("row", ZBV_ROWS, ids=lambda r: f"{r['model']}-m{r['m']}")
def test_zb_v_reproduces_the_arxiv_column_at_the_1f1b_peak(row):
    inst = _arxiv_instance(row)
    r = validate(inst, zb_v(inst))  # raises if the 2p limit is exceeded
    assert max(r.peak_memory) == 2 * inst.p
    assert r.bubble_span == pytest.approx(float(row["ZB-V"]), abs=0.001)


# Per-row profiled times in microseconds (p, m, F, I, W, comm) that the authors fed their V
# generator for the arXiv table (figures from their repository's v_schedule.py); the CSV rounds
# them per model. With them our ZB-V hits the published column to its last digit.
PROFILED = [(16, 48, 14407, 14380, 9676, 1610), (16, 64, 14412, 14393, 9688, 1621),
            (16, 128, 14316, 14306, 9639, 1619), (24, 72, 6763, 6969, 5251, 755),
            (24, 96, 6783, 6984, 5259, 758), (24, 192, 6785, 6990, 5260, 770),
            (32, 96, 9458, 9748, 7288, 879), (32, 128, 9469, 9744, 7306, 892),
            (32, 256, 9447, 9644, 7193, 887)]


@pytest.mark.parametrize("k", [0, 3, 6], ids=lambda k: f"p{PROFILED[k][0]}-m{PROFILED[k][1]}")
def test_zb_v_matches_the_column_to_its_last_digit_with_the_profiled_times(k):
    p, m, f, i, w, c = PROFILED[k]
    inst = make_instance(p=p, m=m, v=2, placement="v", F=f / 1000, I=i / 1000, W=w / 1000,
                         comm=c / 1000, weight=0.432, limit=2 * p)
    r = validate(inst, zb_v(inst))
    assert max(r.peak_memory) == 2 * p
    assert r.bubble_span == pytest.approx(float(ZBV_ROWS[k]["ZB-V"]), abs=0.00005)


def test_zb_v_exact_figures_on_the_first_arxiv_row():
    """p=16, m=48 (F=14.41, I=14.38, W=9.68, comm=1.61): the worst device idles 276.67 ms
    over a step of 48 x 2 x 38.47 = 3693.12 ms of work, 276.67 / 3969.79 = 0.0697."""
    inst = _arxiv_instance(ZBV_ROWS[0])
    r = simulate(inst, zb_v(inst))
    assert r.max_span - inst.device_work(0) == pytest.approx(276.67, abs=1e-6)
    assert r.max_span == pytest.approx(3969.79, abs=1e-6)


def test_construction_times_are_the_simulators():
    """The construction times each op as it places it; the simulator must agree exactly."""
    inst = _arxiv_instance(ZBV_ROWS[3])  # p = 24, m = 72
    for c in zbv.candidates(inst):
        r = simulate(inst, Schedule(c.orders))
        assert r.span == pytest.approx(c.span, abs=1e-6)
        assert r.makespan == pytest.approx(c.makespan, abs=1e-6)
        assert [r.span[d] - inst.device_work(d) for d in range(inst.p)] == pytest.approx(
            c.idle, abs=1e-6)


def test_fill_rules_matter_and_the_best_is_kept():
    """p=32, m=96: the lazy fill setting (no W beyond the allowance) gives the least span."""
    inst = _arxiv_instance(ZBV_ROWS[6])
    built = {c.rules: c.max_span for c in zbv.candidates(inst)}
    assert len(built) == 4
    assert built[zbv.FillRules(False, False)] == pytest.approx(5408.78, abs=1e-6)
    assert built[zbv.FillRules(True, True)] == pytest.approx(5412.08, abs=1e-6)
    assert built[zbv.FillRules(True, False)] == pytest.approx(5426.59, abs=1e-6)
    assert simulate(inst, zb_v(inst)).max_span == pytest.approx(5408.78, abs=1e-6)


def test_zb_v_falls_back_where_the_construction_does_not_apply():
    """Uneven stage times can break the construction's counting rules (here the steady
    state would need an input backward whose input is not placed yet); the list scheduler
    then produces the schedule (valid, at the 2p peak)."""
    inst = make_instance(p=2, m=6, v=2, placement="v", F=[2, 0.5, 0.5, 1])
    assert zbv.candidates(inst) == []
    with pytest.raises(zbv.ConstructionError, match="device"):
        zbv.construct(inst, zbv.ALL_RULES[0])
    r = simulate(inst, zb_v(inst))
    assert r.busy == pytest.approx([inst.device_work(d) for d in range(inst.p)])
    assert max(r.peak_memory) <= 2 * inst.p


def test_zb_v_on_uneven_stages_is_the_best_of_construction_and_list_scheduler():
    inst = make_instance(p=4, m=12, v=2, placement="v", F=[1, 1.5, 1, 1, 2, 1, 1, 1],
                         I=[1, 1, 1.2, 1, 1, 1, 2, 1], W=1.0, comm=0.1, weight=0.4)
    built = zbv.candidates(inst)
    assert built
    ours = simulate(inst, zb_v(inst)).max_span
    assert ours <= min(c.max_span for c in built) + 1e-9


# ---------------------------------------------------------------------- DualPipeV
def _read_torch_csv(path: Path) -> list[list[Op]]:
    """Test-local reader: one row per rank; ``(a;b)OVERLAP_F_B`` = a then b."""
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        ops: list[Op] = []
        for cell in line.strip().split(","):
            pair = re.fullmatch(r"\((\w+);(\w+)\)OVERLAP_F_B", cell)
            ops += [parse_op(pair[1]), parse_op(pair[2])] if pair else [parse_op(cell)]
        rows.append(ops)
    return rows


def test_dualpipev_reproduces_pytorchs_own_order():
    torch_orders = _read_torch_csv(REFERENCE / "torch-artifacts" / "dualpipev_4rank_10mb.csv")
    inst = make_instance(p=4, m=10, v=2, placement="v")
    ours = dualpipev(inst)
    assert ours.orders == torch_orders
    theirs = simulate(inst, Schedule(torch_orders))
    assert simulate(inst, ours).makespan == theirs.makespan == 63


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_dualpipev_bubble(ranks):
    """DualPipe's bubble (P/2 - 1)(F&B + B - 3W) counts P = DualPipe ranks = 2 x DualPipeV ranks
    (= stages): (ranks - 1)(F&B + B - 3W) here, with B the full backward and F&B = F + B when
    the overlap is run as two ops. ASAP execution starts the B of a pair as soon as its input
    is there, so the measured idle is at most that (unit cost: exactly ranks - 1)."""
    inst = make_instance(p=ranks, m=4 * ranks, v=2, placement="v")
    r = simulate(inst, dualpipev(inst))
    assert r.max_span - inst.device_work(0) == ranks - 1
    for F, I, W in ((1, 2, 1), (2, 1, 1), (1.5, 1.2, 0.7)):
        inst = make_instance(p=ranks, m=4 * ranks, v=2, placement="v", F=F, I=I, W=W)
        r = simulate(inst, dualpipev(inst))
        B = I + W
        assert r.max_span - inst.device_work(0) <= (ranks - 1) * (F + B + B - 3 * W) + 1e-9


# ---------------------------------------------------------------------- shipped instances
def test_shipped_v_instances_load_and_name_their_source():
    for folder, rows, csv_name in (("vshape", UNIT_ROWS, "vshape_unit_cost.csv"),
                                   ("zbv-arxiv", ZBV_ROWS, "zbv_arxiv_bubble_rates.csv")):
        files = sorted((INSTANCES / folder).glob("*.yaml"))
        assert len(files) == len(rows)
        for path in files:
            inst = load_instance(path)
            n = int(re.search(rf"{csv_name} row (\d+)", inst.extra["source"])[1])
            row = rows[n - 1]
            assert (inst.p, inst.m, inst.v, inst.placement_kind) == (
                int(row["p"]), int(row["m"]), 2, "v")
            assert set(inst.activation) == {1.0}
            if folder == "vshape":
                assert (inst.F[0], inst.I[0], inst.W[0], inst.comm) == (1, 1, 1, 0)
                assert set(inst.weight) == {0.0} and set(inst.limit) == {None}
            else:
                assert (inst.F[0], inst.I[0], inst.W[0], inst.comm) == tuple(
                    float(row[k]) for k in ("T_F", "T_B", "T_W", "T_comm"))
                assert set(inst.weight) == {0.432} and set(inst.limit) == {2.0 * inst.p}


# ---------------------------------------------------------------------- property
@st.composite
def _v_instances(draw):
    p = draw(st.integers(1, 8))
    m = draw(st.integers(1, 24))
    S = 2 * p
    t = st.lists(st.floats(0.1, 5.0), min_size=S, max_size=S)
    act = draw(st.lists(st.floats(0.5, 3.0), min_size=S, max_size=S))
    frac = draw(st.lists(moderate_floats(0.0, 1.0), min_size=S, max_size=S))
    return make_instance(
        p=p, m=m, v=2, placement=draw(st.sampled_from(["v", "v", "loop"])),
        F=draw(t), I=draw(t), W=draw(t), comm=draw(st.sampled_from([0.0, 0.05, 1.0])),
        activation=act, weight=[a * f for a, f in zip(act, frac)])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_v_instances())
def test_every_applicable_v_generator_yields_a_valid_schedule(inst):
    for name in V_NAMES:
        try:
            sched = generate(name, inst)
        except NotApplicable:
            assert inst.placement_kind != "v" or (name == "dualpipev" and inst.m < 2 * inst.p)
            continue
        r = simulate(inst, sched)
        assert r.busy == pytest.approx([inst.device_work(d) for d in range(inst.p)])



@st.composite
def _renumbered_v(draw):
    """A V instance with per-device limits, and the same pipeline with its devices renumbered
    by a drawn permutation (an explicit placement; the limits follow their devices)."""
    p = draw(st.integers(2, 5))
    m = draw(st.sampled_from([p, 2 * p, 2 * p + 1]))
    S = 2 * p
    t = st.lists(st.integers(1, 4), min_size=S, max_size=S)
    act = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=S, max_size=S))
    inst = make_instance(p=p, m=m, v=2, placement="v", F=draw(t), I=draw(t), W=draw(t),
                         comm=draw(st.sampled_from([0.0, 1.0])), activation=act,
                         weight=[a / 2 for a in act])
    limit = [x + draw(st.sampled_from([0.0, 2.0, 40.0])) for x in min_memory_limit(inst)]
    inst = inst.with_(limit=limit)
    perm = draw(st.permutations(range(p)))
    renumbered = inst.with_(placement=[perm[d] for d in inst.placement],
                            limit=[limit[perm.index(d)] for d in range(p)])
    return inst, renumbered, perm


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_renumbered_v())
def test_v_families_run_on_a_v_whose_devices_are_numbered_otherwise(drawn):
    # an explicit placement such as [1, 0, 0, 1] is a V; the families once read it as their
    # own numbering (v-min and v-half crashed, zb-v and torch-zbv wrote rows for the wrong
    # devices): each device now runs the row of the V device it plays
    inst, renumbered, perm = drawn
    for name in (*V_NAMES, "torch-zbv"):
        try:
            plain = generate(name, inst)
        except NotApplicable as exc:
            with pytest.raises(NotApplicable, match=re.escape(str(exc))):
                generate(name, renumbered)
            continue
        sched = generate(name, renumbered)
        assert [sched.orders[perm[d]] for d in range(inst.p)] == plain.orders
        a, b = simulate(inst, plain), simulate(renumbered, sched)
        assert b.makespan == a.makespan and b.max_span == a.max_span
        assert [b.peak_memory[perm[d]] for d in range(inst.p)] == a.peak_memory

@st.composite
def _uniform_v_instances(draw):
    """The authors' setting: equal stages, any times, comm and weight share, any p and m."""
    p = draw(st.integers(1, 8))
    a = draw(st.floats(0.5, 3.0))
    t = st.floats(0.1, 5.0)
    return make_instance(
        p=p, m=draw(st.integers(1, 24)), v=2, placement="v", F=draw(t), I=draw(t), W=draw(t),
        comm=draw(st.sampled_from([0.0, 0.05, 1.0])), activation=a,
        weight=a * draw(moderate_floats(0.0, 1.0)), limit=2 * p * a)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_uniform_v_instances())
def test_construction_applies_to_every_uniform_instance_within_the_1f1b_peak(inst):
    built = zbv.candidates(inst)
    assert [c.rules for c in built] == list(zbv.ALL_RULES)
    for c in built:
        r = validate(inst, Schedule(c.orders))  # raises above 2p chunk activations
        assert r.max_span == pytest.approx(c.max_span, abs=1e-6)
