"""zbsolve.io: atomic writes, strict JSON/YAML reading, output checks before the work."""

from __future__ import annotations

import os

import pytest

from zbsolve.io import (
    InputFileError,
    OutputPathError,
    atomic_open,
    atomic_path,
    atomic_write_text,
    check_output,
    json_data_errors,
    parse_json,
    parse_yaml,
    read_data,
    write_json,
)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_atomic_write_replaces_whole_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    atomic_write_text(target, "old")
    assert target.read_text() == "old"
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(target, "new" * 1000)
    assert target.read_text() == "old", "a failed write must leave the old file"
    assert _leftovers(tmp_path) == [], "no temporary file may stay behind"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_open_and_path_only_replace_when_the_block_ends(tmp_path):
    target = tmp_path / "t.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as fh:
            fh.write("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    with atomic_open(target, newline="") as fh:
        fh.write("new")
    assert target.read_text() == "new"
    png = tmp_path / "p.png"
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(png) as tmp:
            assert tmp.suffix == ".png" and tmp.parent == tmp_path
            tmp.write_bytes(b"x")
            raise KeyboardInterrupt
    assert not png.exists() and _leftovers(tmp_path) == []
    with atomic_path(png) as tmp:
        tmp.write_bytes(b"picture")
    assert png.read_bytes() == b"picture"


def test_write_json_refuses_nan():
    with pytest.raises(ValueError, match="NaN and infinity are not JSON"):
        write_json("/nonexistent/x.json", {"a": float("nan")})


def test_json_reader_names_file_line_duplicates_and_nan():
    with pytest.raises(InputFileError, match=r"^f.json: not valid JSON: line 2 column 1: "):
        parse_json('{"a": 1,\n', "f.json")
    with pytest.raises(InputFileError, match="f.json: duplicate key 'a'"):
        parse_json('{"a": 1, "b": {"c": 2}, "a": 3}', "f.json")
    with pytest.raises(InputFileError, match="f.json: NaN is not a JSON number"):
        parse_json('{"a": NaN}', "f.json")
    assert parse_json('{"a": 6e-05}', "f.json") == {"a": 6e-05}


def test_yaml_reader_reads_numbers_as_numbers_and_no_dates():
    data = parse_yaml("a: 6e-05\nb: 1e3\nc: 1.0e+300\nd: 2024-01-01\ne: yes\nf: true\ng: null\n"
                      "h: 0x10\ni: -7\n", "f.yaml")
    assert data == {"a": 6e-05, "b": 1000.0, "c": 1e300, "d": "2024-01-01", "e": "yes",
                    "f": True, "g": None, "h": "0x10", "i": -7}
    with pytest.raises(InputFileError, match="f.yaml: not valid YAML: line 3 column 1: duplicate key 'a'"):
        parse_yaml("a: 1\nb: 2\na: 3\n", "f.yaml")
    with pytest.raises(InputFileError, match="timestamp values are not JSON data"):
        parse_yaml("a: !!timestamp 2024-01-01\n", "f.yaml")
    with pytest.raises(InputFileError, match="f.yaml: not valid YAML"):
        parse_yaml("a: [1, 2\n", "f.yaml")


def test_read_data_picks_json_by_name_and_names_bad_files(tmp_path):
    j = tmp_path / "i.json"
    j.write_text('{"x": 1e3}')
    assert read_data(j) == {"x": 1000.0}
    with pytest.raises(InputFileError, match="is a folder"):
        read_data(tmp_path)
    with pytest.raises(InputFileError, match="does not exist"):
        read_data(tmp_path / "nope.yaml")
    b = tmp_path / "b.yaml"
    b.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(InputFileError, match="not UTF-8 text"):
        read_data(b)
    if os.geteuid() != 0:  # root reads everything
        u = tmp_path / "u.yaml"
        u.write_text("a: 1")
        u.chmod(0)
        with pytest.raises(InputFileError, match="cannot read"):
            read_data(u)


def test_json_data_errors_names_the_path():
    import datetime

    assert json_data_errors({"a": [1, "x", None, True, {"b": 2.5}]}, "meta") == []
    assert json_data_errors({"a": [datetime.date(2024, 1, 1)]}, "meta") == [
        "meta.a[0]: a date is not JSON data (write it as a string)"]
    assert json_data_errors({1: "x"}, "meta") == ["meta: key 1 is not a string"]
    assert json_data_errors({"x": float("inf")}, "meta") == ["meta.x: inf is not a JSON number"]


def test_check_output_finds_problems_before_the_work(tmp_path):
    (tmp_path / "f").write_text("x")
    inp = tmp_path / "in.json"
    inp.write_text("{}")
    with pytest.raises(OutputPathError, match="is a folder"):
        check_output(tmp_path, suffixes=())
    with pytest.raises(OutputPathError, match=r"f is a file, not a folder"):
        check_output(tmp_path / "f" / "below" / "x.json")
    with pytest.raises(OutputPathError, match="is also an input"):
        check_output(tmp_path / "sub" / ".." / "in.json", inputs=[inp])
    with pytest.raises(OutputPathError, match=r"the file written is \.json; name it so \(e.g. s.json\)"):
        check_output(tmp_path / "s.csv", suffixes=(".json",))
    with pytest.raises(OutputPathError, match="is a file; give a folder"):
        check_output(tmp_path / "f", kind="folder")
    assert check_output(tmp_path / "new" / "deeper" / "s.json", suffixes=(".json",))
    assert not (tmp_path / "new").exists(), "checking creates nothing"
    (tmp_path / "r.json").write_text("{}")
    (tmp_path / "r.json").chmod(0o444)
    with pytest.raises(OutputPathError, match="exists and is read-only"):
        check_output(tmp_path / "r.json")
    with pytest.raises(OutputPathError, match="not a regular file"):
        check_output("/dev/null")
    with pytest.raises(OutputPathError, match="cannot write in /proc"):
        check_output("/proc/zbsolve-out.json")
    assert _leftovers(tmp_path) == []
