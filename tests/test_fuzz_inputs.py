"""Fuzzing the command line with malformed files and flags (hypothesis).

Every example takes a valid instance, schedule, executor table or torch CSV, breaks it in one way
that is certain to make it invalid (a bad value, a missing or duplicated part, a moved action, a
cut-off file, ...), and runs a subcommand on it. Whatever the break, the command must:
exit non-zero, write exactly one line on stderr, show no traceback, finish in bounded time, and
change no file except the output it was asked to write.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbsolve.baselines import generate
from zbsolve.cli import main
from zbsolve.export.executor import lower
from zbsolve.export.torch_csv import table_rows
from zbsolve.instance import load_instance

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
BOUND_S = 60.0  # a hang guard, far above what any example needs

INSTANCE = {"name": "fuzz", "devices": 3, "microbatches": 4, "chunks": 1, "placement": "loop",
            "times": {"F": 1.0, "I": 1.2, "W": 0.7}, "comm": 0.3,
            "memory": {"activation": 1.0, "weight": 0.4, "limit": None}}
_INST = load_instance(INSTANCE)
_SCHED = generate("zb-h1", _INST)
_TABLE = lower(_INST, _SCHED)
SCHEDULE = _SCHED.to_dict()
TABLE = json.loads(json.dumps(_TABLE.to_dict()))
COMMS_ROWS = table_rows(_TABLE)

# ------------------------------------------------------------------ ways to break an instance
BAD_VALUES = {
    ("devices",): [0, -1, 1.5, "3", None, True, 10**9, [], {}],
    ("microbatches",): [0, -2, 2.5, "4", None, False, 10**9],
    ("chunks",): [0, -1, "1", 1.5, 100],
    ("placement",): ["zigzag", [0, 1], [0, 1, 5], [0, 0, 0], 3, None, {}],
    ("times",): [None, [], "1", {"F": 1, "I": 1}],
    ("times", "F"): [0, -1, "x", None, [1, 2], 1e300, 1e-300, True, [1, 1, -1]],
    ("times", "I"): [0, -0.5, "fast", [], {}],
    ("times", "W"): [0, None, [0.1, 0.2, 0.3, 0.4]],
    ("comm",): [-1, "x", [], 1e300, None, True],
    ("memory",): [[], "big", 3],
    ("memory", "activation"): [0, -1, "x", 1e300, [1]],
    ("memory", "weight"): [-1, 5, "x", [0.1]],
    ("memory", "limit"): [0, -1, "x", [1, 2], True],
    ("name",): [["x"], {"a": 1}],
}


def _set(data: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _strict_prefix(text: str, cut: int) -> str:
    """A prefix of a JSON object's text that is not itself valid JSON (at least the closing
    brace is gone)."""
    return text[: min(cut, len(text.rstrip()) - 1)]


@st.composite
def broken_instance_text(draw) -> str:
    data = copy.deepcopy(INSTANCE)
    how = draw(st.sampled_from(["value", "missing", "unknown", "duplicate", "truncate", "bytes"]))
    if how == "value":
        path = draw(st.sampled_from(sorted(BAD_VALUES)))
        _set(data, path, draw(st.sampled_from(BAD_VALUES[path])))
    elif how == "missing":
        path = draw(st.sampled_from([("devices",), ("microbatches",), ("times",),
                                     ("times", "F"), ("times", "W")]))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
    elif how == "unknown":
        where = draw(st.sampled_from([(), ("times",), ("memory",)]))
        parent = data
        for key in where:
            parent = parent[key]
        parent[draw(st.sampled_from(["colour", "X", "limits"]))] = 1
    text = json.dumps(data)
    if how == "duplicate":
        key = draw(st.sampled_from(["devices", "microbatches", "comm"]))
        text = text[:-1] + f', "{key}": {json.dumps(data[key])}}}'
    elif how == "truncate":
        text = _strict_prefix(text, draw(st.integers(0, len(text))))
    elif how == "bytes":
        text = draw(st.sampled_from(["", "[]", "null", "3", "\"x\"", "{", "}{", "\x00"]))
    return text


# ------------------------------------------------------------------ ways to break a schedule
@st.composite
def broken_schedule_text(draw) -> str:
    data = copy.deepcopy(SCHEDULE)
    rows = data["orders"]
    how = draw(st.sampled_from(["token", "nonstring", "rows", "duplicate", "drop", "move",
                                "range", "starts", "format", "truncate", "toplevel"]))
    d = draw(st.integers(0, len(rows) - 1))
    i = draw(st.integers(0, len(rows[d]) - 1))
    if how == "token":
        rows[d][i] = draw(st.sampled_from(["0X0", "", "F0", "0F", "0F0x", "-1F0", "0f0", "0F 0"]))
    elif how == "nonstring":
        rows[d][i] = draw(st.sampled_from([5, None, 1.5, ["0F0"], {"op": "0F0"}, True]))
    elif how == "rows":
        data["orders"] = rows[:-1] if draw(st.booleans()) else rows + [[]]
    elif how == "duplicate":
        rows[d].insert(i, rows[d][i])
    elif how == "drop":
        rows[d].pop(i)
    elif how == "move":  # an op onto another device than its stage's
        rows[(d + 1) % len(rows)].append(rows[d].pop(i))
    elif how == "range":
        rows[d][i] = draw(st.sampled_from(["9F0", "0F99", "3I0", "0W4"]))
    elif how == "starts":
        data["starts"] = draw(st.sampled_from(
            [[[0.0] * len(rows[0])], [[None] * len(r) for r in rows], "x",
             [[0.0] * (len(r) + 1) for r in rows]]))
    elif how == "format":
        key, value = draw(st.sampled_from([("format", "zbsolve-other"), ("version", 2),
                                           ("version", "1"), ("colour", 1), ("name", 3)]))
        data[key] = value
    text = json.dumps(data)
    if how == "truncate":
        text = _strict_prefix(text, draw(st.integers(0, len(text))))
    elif how == "toplevel":
        text = draw(st.sampled_from(["[]", "null", "[[\"0F0\"]]", "1", "\"orders\""]))
    return text


# ------------------------------------------------------------------ ways to break a table
@st.composite
def broken_table_text(draw) -> str:
    data = copy.deepcopy(TABLE)
    ranks = data["ranks"]
    how = draw(st.sampled_from(["drop", "duplicate", "move", "peer", "header", "instance",
                                "type", "truncate"]))
    r = draw(st.integers(0, len(ranks) - 1))
    acts = ranks[r]["actions"]
    i = draw(st.integers(0, len(acts) - 1))
    if how == "drop":
        acts.pop(i)
    elif how == "duplicate":
        acts.insert(i, dict(acts[i]))
    elif how == "move":
        ranks[(r + 1) % len(ranks)]["actions"].insert(0, acts.pop(i))
    elif how == "peer":
        comm = [a for rank in ranks for a in rank["actions"] if a["kind"].startswith(("SEND", "RECV"))]
        a = draw(st.sampled_from(comm))
        a["peer"] = draw(st.sampled_from([x for x in range(5) if x != a["peer"]]))
    elif how == "header":
        key, value = draw(st.sampled_from([("num_ranks", 2), ("num_stages", 4),
                                           ("microbatches", 5), ("placement", [0, 2, 1]),
                                           ("placement", [0, 1]), ("version", 2),
                                           ("format", "zbsolve-schedule")]))
        data[key] = value
    elif how == "instance":
        key, value = draw(st.sampled_from([("devices", 0), ("microbatches", 3), ("comm", 0.9),
                                           ("times", {"F": 2, "I": 1.2, "W": 0.7})]))
        data["instance"][key] = value
    elif how == "type":
        field = draw(st.sampled_from(["stage", "mb", "kind"]))
        acts[i][field] = draw(st.sampled_from(["x", None, -1, [], 1.5]))
    text = json.dumps(data)
    if how == "truncate":
        text = _strict_prefix(text, draw(st.integers(0, len(text))))
    return text


# ------------------------------------------------------------------ ways to break a CSV
@st.composite
def broken_csv_text(draw) -> str:
    rows = [list(r) for r in COMMS_ROWS]
    if draw(st.booleans()):  # the compute-only form
        rows = [[c for c in r if re.fullmatch(r"\d+[FIWB]\d+", c)] for r in rows]
    how = draw(st.sampled_from(["token", "duplicate", "drop", "move", "rows", "truncate"]))
    r = draw(st.integers(0, len(rows) - 1))
    i = draw(st.integers(0, len(rows[r]) - 1))
    if how == "token":
        rows[r][i] = draw(st.sampled_from(["0X0", "0F0x", "SEND_F", "(0F0)OVERLAP_F_B", "0F",
                                           "0RECV_Z0", "\"0F0"]))
    elif how == "duplicate":
        rows[r].insert(i, rows[r][i])
    elif how == "drop":
        rows[r].pop(i)
    elif how == "move":
        rows[(r + 1) % len(rows)].insert(0, rows[r].pop(i))
    elif how == "rows":
        rows = rows[:-1] if draw(st.booleans()) else rows + [["0F0"]]
    text = "\n".join(",".join(row) for row in rows) + "\n"
    if how == "truncate":
        text = text[: draw(st.integers(0, len(text) - 3))]
    return text


# ------------------------------------------------------------------ the contract
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _assert_clean_failure(folder: Path, argv: list[str], output: Path | None = None) -> None:
    before = _snapshot(folder)
    err = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    elapsed = time.monotonic() - t0
    text = err.getvalue()
    assert code not in (0, None), f"accepted: {argv}"
    assert "Traceback" not in text, text
    assert text.count("\n") == 1 and text.endswith("\n"), repr(text)
    assert elapsed < BOUND_S, f"{argv} took {elapsed:.0f} s"
    after = _snapshot(folder)
    named = str(output.relative_to(folder)) if output is not None else None
    changed = {k for k in before.keys() | after.keys()
               if before.get(k) != after.get(k)} - {named}
    assert not changed, f"{argv} changed {changed}"


def _files(tmp: Path, **texts: str) -> dict[str, Path]:
    out = {}
    for name, text in texts.items():
        path = tmp / name
        path.write_text(text)
        out[name] = path
    return out


@FUZZ
@given(text=broken_instance_text(), command=st.sampled_from(["baselines", "solve", "check",
                                                            "show", "sweep"]))
def test_fuzz_instances(text, command):
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        f = _files(tmp, **{"i.json": text, "s.json": json.dumps(SCHEDULE)})
        out = {"solve": tmp / "o.json", "show": tmp / "o.png", "sweep": tmp / "sw"}.get(command)
        argv = {
            "baselines": ["baselines", str(f["i.json"])],
            "solve": ["solve", str(f["i.json"]), "-o", str(out), "--time-limit", "1"],
            "check": ["check", str(f["i.json"]), str(f["s.json"])],
            "show": ["show", str(f["i.json"]), str(f["s.json"]), "-o", str(out)],
            "sweep": ["sweep", str(f["i.json"]), "--limits", "1", "-o", str(out),
                      "--no-progress", "--no-plot", "--time-limit", "1"],
        }[command]
        _assert_clean_failure(tmp, argv, out)


@FUZZ
@given(text=broken_schedule_text(),
       command=st.sampled_from(["check", "export", "show"]),
       fmt=st.sampled_from(["executor", "torch-csv", "torch-csv-comms", "chrome-trace"]))
def test_fuzz_schedules(text, command, fmt):
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        f = _files(tmp, **{"i.json": json.dumps(INSTANCE), "s.json": text})
        suffix = ".csv" if fmt.startswith("torch") else ".json"
        out = {"export": tmp / f"o{suffix}", "show": tmp / "o.png"}.get(command)
        argv = {
            "check": ["check", str(f["i.json"]), str(f["s.json"])],
            "export": ["export", str(f["s.json"]), "--instance", str(f["i.json"]), "--format",
                       fmt, "-o", str(out)],
            "show": ["show", str(f["i.json"]), str(f["s.json"]), "-o", str(out)],
        }[command]
        _assert_clean_failure(tmp, argv, out)


@FUZZ
@given(text=broken_table_text(), command=st.sampled_from(["check", "export", "show", "run"]))
def test_fuzz_tables(text, command):
    if command == "run" and '"comm": 0.9' in text or '"F": 2,' in text and command == "run":
        return  # run has no other instance to compare the embedded one with: not a break
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        f = _files(tmp, **{"i.json": json.dumps(INSTANCE), "t.json": text})
        out = {"export": tmp / "o.json", "show": tmp / "o.png"}.get(command)
        argv = {
            "check": ["check", str(f["i.json"]), str(f["t.json"])],
            "export": ["export", str(f["t.json"]), "--instance", str(f["i.json"]), "--format",
                       "executor", "-o", str(out)],
            "show": ["show", str(f["i.json"]), str(f["t.json"]), "-o", str(out)],
            # run refuses before it starts any rank (the table is checked first)
            "run": ["run", str(f["t.json"]), "--layers", "3", "--timeout", "10"],
        }[command]
        _assert_clean_failure(tmp, argv, out)


@FUZZ
@given(text=broken_csv_text(), command=st.sampled_from(["check", "export"]))
def test_fuzz_torch_csvs(text, command):
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        f = _files(tmp, **{"i.json": json.dumps(INSTANCE), "c.csv": text})
        out = tmp / "o.json"
        argv = {
            "check": ["check", str(f["i.json"]), str(f["c.csv"])],
            "export": ["export", str(f["c.csv"]), "--instance", str(f["i.json"]), "--format",
                       "executor", "-o", str(out)],
        }[command]
        _assert_clean_failure(tmp, argv, out)


BAD_FLAGS = {
    "solve": [("--time-limit", ["-1", "nan", "x", "inf"]), ("--workers", ["0", "-2", "1.5"]),
              ("--seed", ["-1", "2147483648", "x"]), ("--gap", ["-0.1", "nan", "2"]),
              ("--objective", ["speed"]), ("--method", ["fast"]), ("-o", ["DIR", "o.csv"])],
    "sweep": [("--limits", ["0.5:2:1e-12", "2:1:0.1", "0", "a,b", "1:2", ""]),
              ("--jobs", ["0", "-1"]), ("--time-limit", ["0", "-5"]), ("--target-bubble", ["1.5", "-1"]),
              ("--memory", ["0", "-1"]), ("--chunks", ["x", "0"]), ("--placements", ["zigzag"])],
    "run": [("--rtol", ["-1", "nan"]), ("--nproc", ["0", "-1"]), ("--timeout", ["0", "-1"]),
            ("--threads", ["0"]), ("--steps", ["0"]), ("--lr", ["nan", "-1", "0"]),
            ("--seed", ["2147483648"]), ("--layers", ["0"]), ("--engine", ["jax"])],
    "profile": [("--device", ["tpu", "cuda:x", "gpu"]), ("--warmup", ["-1"]), ("--repeats", ["0"]),
                ("--threads", ["0"]), ("--devices", ["0"]), ("--round", ["0"])],
    "export": [("--format", ["png"]), ("-o", ["DIR", "o.txt"])],
    "show": [("-o", ["o.txt", "DIR"])],
}


@FUZZ
@given(data=st.data(), command=st.sampled_from(sorted(BAD_FLAGS)))
def test_fuzz_flags(data, command):
    flag, values = data.draw(st.sampled_from(BAD_FLAGS[command]))
    value = data.draw(st.sampled_from(values))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        f = _files(tmp, **{"i.json": json.dumps(INSTANCE), "s.json": json.dumps(SCHEDULE),
                           "t.json": json.dumps(TABLE)})
        value = str(tmp) if value == "DIR" else value
        value = str(tmp / value) if value.startswith("o.") else value
        base = {
            "solve": ["solve", str(f["i.json"]), "--time-limit", "1"],
            "sweep": ["sweep", str(f["i.json"]), "-o", str(tmp / "sw"), "--no-progress",
                      "--no-plot", "--time-limit", "1"],
            "run": ["run", str(f["t.json"]), "--layers", "3"],
            "profile": ["profile", "--devices", "2", "--microbatches", "2", "-o",
                        str(tmp / "p.yaml")],
            "export": ["export", str(f["s.json"]), "--instance", str(f["i.json"]), "--format",
                       "executor", "-o", str(tmp / "o.json")],
            "show": ["show", str(f["i.json"]), str(f["s.json"]), "-o", str(tmp / "o.png")],
        }[command]
        _assert_clean_failure(tmp, [*base, flag, value])
