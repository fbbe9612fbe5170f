"""Timeline pictures: what is drawn (bars, labels, memory panels, P2P ticks) and the show CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from zbsolve.baselines import generate
from zbsolve.export.executor import lower
from zbsolve.instance import load_instance
from zbsolve.plot import KIND_COLORS, save_timeline, timeline_figure
from zbsolve.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
P8 = ROOT / "instances" / "gpt-1.5b-p8-m24.yaml"
P4 = ROOT / "instances" / "seed" / "teaching-p4-m8.yaml"


class _Bar:
    """One Gantt bar read back from the chart's PolyCollection (Rectangle-like accessors)."""

    def __init__(self, vertices, color):
        xs, ys = vertices[:, 0], vertices[:, 1]
        self.x, self.y, self.w = float(xs.min()), float(ys.min()), float(xs.max() - xs.min())
        self.color = tuple(color)

    def get_x(self):
        return self.x

    def get_y(self):
        return self.y

    def get_width(self):
        return self.w

    def get_facecolor(self):
        return self.color


def _bars(fig):
    from matplotlib.collections import PolyCollection

    gantt = fig.axes[0]
    (bars,) = [c for c in gantt.collections if isinstance(c, PolyCollection)]
    return [_Bar(path.vertices, color)
            for path, color in zip(bars.get_paths(), bars.get_facecolors())]


def test_gantt_has_one_bar_per_op_and_readable_labels():
    inst = load_instance(P4)
    sched = generate("1f1b", inst)
    fig = timeline_figure(inst, sched)
    bars = _bars(fig)
    assert len(bars) == len(sched) == 2 * inst.devices * inst.microbatches
    sim = simulate(inst, sched)
    # device 0 is the top row (y = p-1); its first bar is 0F0 at t = 0, width F
    first = min((b for b in bars if abs(b.get_y() + 0.4 - (inst.devices - 1)) < 1e-9),
                key=lambda b: b.get_x())
    assert (first.get_x(), first.get_width()) == (0.0, 1.0)
    colors = {tuple(round(c, 3) for c in b.get_facecolor()[:3]) for b in bars}
    assert len(colors) == 2  # F and B, one chunk
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert len(labels) == len(sched)  # p=4, m=8: every bar is wide enough for its label
    assert sorted(labels) == sorted(str(op.mb) for order in sched.orders for op in order)
    title = fig._suptitle.get_text()
    assert f"makespan {sim.makespan:.4g}" in title and "27.3%" in title
    assert len(fig.axes) == 1 + inst.devices  # Gantt + one memory panel per device


def test_memory_panels_show_the_limit_and_the_peak():
    inst = load_instance(P8)
    sched = generate("zb-h1", inst)
    fig = timeline_figure(inst, sched)
    sim = simulate(inst, sched)
    for d, ax in enumerate(fig.axes[1:]):
        dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
        assert len(dashed) == 1 and dashed[0].get_ydata()[0] == inst.limit[d]
        assert ax.get_ylabel() == f"d{d} {sim.peak_memory[d]:.3g}/{inst.limit[d]:.3g}"


def test_executor_table_adds_send_and_receive_ticks():
    inst = load_instance(P4).with_(comm=0.2)
    sched = generate("1f1b", inst)
    table = lower(inst, sched)
    fig = timeline_figure(inst, sched, table=table)
    sends = sum(len(ln.get_xdata()) for ln in fig.axes[0].lines if ln.get_marker() == "v")
    recvs = sum(len(ln.get_xdata()) for ln in fig.axes[0].lines if ln.get_marker() == "^")
    n = 2 * inst.microbatches * (inst.devices - 1)
    assert sends == recvs == n


def test_chunk_shades_differ():
    inst = load_instance(ROOT / "instances" / "seed" / "teaching-p4-m8-v2.yaml")
    sched = generate("1f1b-interleaved", inst)
    bars = _bars(timeline_figure(inst, sched))
    colors = {tuple(round(c, 3) for c in b.get_facecolor()[:3]) for b in bars}
    assert len(colors) == 4  # F and B, two chunks each
    assert len(set(KIND_COLORS.values())) == len(KIND_COLORS)  # every kind its own colour


@pytest.mark.parametrize("path", [P4, P8])
def test_png_size(tmp_path, path):
    from matplotlib.image import imread

    inst = load_instance(path)
    out = save_timeline(inst, generate("1f1b", inst), tmp_path / "t.png")
    img = imread(out[0])
    height = 120 * (max(2.0, 0.42 * inst.devices + 0.8) + 0.55 * inst.devices + 1.6)
    assert img.shape[1] == 14 * 120 and abs(img.shape[0] - height) <= 1


def test_show_cli(tmp_path, capsys):
    from zbsolve.cli import main

    inst = load_instance(P4)
    sched_path = tmp_path / "s.json"
    generate("1f1b", inst).dump(sched_path)
    out = tmp_path / "pics" / "timeline.png"
    assert main(["show", str(P4), str(sched_path), "-o", str(out), "--svg"]) == 0
    assert out.stat().st_size > 10_000 and out.with_suffix(".svg").exists()
    assert f"wrote {out}" in capsys.readouterr().out
    table_path = tmp_path / "t.json"
    assert main(["export", str(sched_path), "--instance", str(P4), "--format", "executor",
                 "-o", str(table_path)]) == 0
    assert main(["show", str(P4), str(table_path), "-o", str(tmp_path / "table.png")]) == 0
    other = tmp_path / "v.yaml"
    other.write_text("devices: 4\nmicrobatches: 8\nchunks: 2\nplacement: v\n"
                     "times: {F: 1, I: 1, W: 1}\n")
    capsys.readouterr()
    assert main(["show", str(other), str(table_path), "-o", str(tmp_path / "x.png")]) == 2
    assert "placement" in capsys.readouterr().err


@pytest.mark.parametrize("path, name", [
    (ROOT / "instances" / "default.yaml", "zb-h1"),  # m = 24, F/I/W of 9 to 19 ms
    (ROOT / "instances" / "zb-iclr" / "1.5b-p8-m64.yaml", "zb-h1"),  # m = 64
    (ROOT / "instances" / "torch-dualpipev-p4-m10.yaml", "dualpipev"),  # m = 10, two chunks
])
def test_every_bar_keeps_its_microbatch_number_from_ten_up(path, name):
    """Two-digit numbers fit: the figure widens (within MAX_WIDTH) and narrow bars write their
    number upright, so no bar is left bare and no number spills out of its bar."""
    from zbsolve.plot import MAX_WIDTH

    inst = load_instance(path)
    sched = generate(name, inst)
    fig = timeline_figure(inst, sched)
    texts = fig.axes[0].texts
    assert sorted(t.get_text() for t in texts) == sorted(
        str(op.mb) for order in sched.orders for op in order)
    assert 14 <= fig.get_figwidth() <= MAX_WIDTH
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[-1] == "numbers = microbatch"
    # each number lies inside its bar, whichever way it is written
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    bars = {(round(b.get_x() + b.get_width() / 2, 6), round(b.get_y() + 0.4, 6)): b
            for b in _bars(fig)}
    to_px = fig.axes[0].transData.transform
    for t in texts:
        bar = bars[(round(t.get_position()[0], 6), round(t.get_position()[1], 6))]
        box = t.get_window_extent(renderer)
        (x0, _), (x1, _) = to_px((bar.get_x(), 0)), to_px((bar.get_x() + bar.get_width(), 0))
        assert x0 - 0.5 <= box.x0 and box.x1 <= x1 + 0.5, (t.get_text(), t.get_rotation())


def test_too_many_ops_for_numbers_says_so_in_the_legend():
    from conftest import make_instance

    # W is 1/20 of F: at the widest figure the 100 W bars of each device are too narrow
    inst = make_instance(p=2, m=100, F=1.0, I=1.0, W=0.05)
    sched = generate("zb-h1", inst)
    fig = timeline_figure(inst, sched)
    assert fig.get_figwidth() == 40.0
    legend = fig.axes[0].get_legend().get_texts()[-1].get_text()
    numbered = {(t.get_text()) for t in fig.axes[0].texts}
    bare = len(sched) - len(fig.axes[0].texts)
    assert bare == 2 * 100 and numbered == {str(j) for j in range(100)}  # F and I keep theirs
    assert legend == f"numbers = microbatch ({bare} ops too short to number at this width)"


def test_memory_is_labelled_with_the_instance_unit():
    inst = load_instance({"devices": 2, "microbatches": 4, "times": {"F": 1, "I": 1, "W": 1},
                          "memory": {"activation": "1.5GiB", "limit": "80GB"}})
    fig = timeline_figure(inst, generate("1f1b", inst))
    assert fig._suptitle.get_text().endswith("peak memory max 3 GiB")
    assert fig.axes[1].get_title(loc="left").startswith("memory per device in GiB")
    plain = load_instance(P4)
    fig = timeline_figure(plain, generate("1f1b", plain))
    assert fig.axes[1].get_title(loc="left").startswith("memory per device (peak/limit")


@pytest.mark.parametrize("name", ["1f1b-offload", "1f1b-recompute"])
def test_memory_mode_jobs_are_drawn_and_copies_sit_under_their_device(name):
    # the chart once knew only F, I, W and B and raised KeyError on a recompute or a copy
    inst = load_instance({"devices": 4, "microbatches": 8, "times": {"F": 1, "I": 1.2, "W": 0.7},
                          "comm": 0.3, "recompute": {"R": 1.0, "kept": 0.1},
                          "offload": {"d2h": 0.3},
                          "memory": {"activation": 1.0, "weight": 0.4, "limit": 3.5}})
    sched = generate(name, inst)
    sim = simulate(inst, sched)
    fig = timeline_figure(inst, sched)
    bars = _bars(fig)
    assert len(bars) == len(sched)
    copies = [op for op in sched.ops() if op.kind in ("O", "L")]
    assert bool(copies) == (name == "1f1b-offload")
    for op in copies:  # a thin bar in the gap under its device's row of compute bars
        y = inst.p - 1 - inst.placement[op.stage]
        assert len([b for b in bars if b.get_x() == sim.start[op]
                    and y - 0.6 < b.get_y() < y - 0.4]) == 1
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    kinds = {"1f1b-offload": {"O copy out (copy stream)", "L load back (copy stream)"},
             "1f1b-recompute": {"R recompute"}}[name]
    assert kinds <= labels
