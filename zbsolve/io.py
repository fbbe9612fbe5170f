"""Reading and writing files so that nothing false comes in and nothing is lost going out.

Writes are atomic: the bytes go to a temporary file beside the target, are flushed to disk, and
the temporary file is renamed over the target (``os.replace``, atomic on POSIX). A full disk, a
crash or Ctrl-C therefore leaves either the old file or the new one, never a cut one.

Reads are strict and their errors are one line that names the file: JSON is read as JSON (with
duplicate keys and NaN refused, and the line/column of a syntax error), YAML with a loader that
reads numbers as numbers (``1e3`` and ``6e-05`` too, which PyYAML's YAML 1.1 rules read as
strings), refuses duplicate keys and does not turn ``2024-01-01`` into a date or ``yes`` into a
bool (JSON has neither: an instance must stay JSON data).

``check_output`` finds, before any work is done, an output that could not be written: a folder
given for a file, a parent that is a file, a read-only target, an output that is one of the
command's inputs, or a name whose suffix disagrees with the format written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from zbsolve.size_limits import MAX_INPUT_BYTES


class InputFileError(ValueError):
    """A file that cannot be read as what it should be; the message names the file."""


class OutputPathError(ValueError):
    """An output that cannot (or must not) be written; found before the work starts."""


# ---------------------------------------------------------------------------- writing
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_beside(path: Path, suffix: str = "") -> tuple[int, Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{suffix}")
    # mkstemp makes 0600 files; a written output gets the mode a plain open() would give it
    os.chmod(tmp, 0o666 & ~_umask())
    return fd, Path(tmp)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file beside it, fsync, ``os.replace``)."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_open(path: str | Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file handle whose content replaces ``path`` only if the block ends normally
    (for writers that want a handle, such as ``csv.writer``)."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w", newline=newline, encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` with the same suffix, renamed onto ``path`` if the block
    ends normally (for writers that take a path: ``savefig``, ``DataFrame.to_csv``)."""
    path = Path(path)
    fd, tmp = _temp_beside(path, path.suffix)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | Path, data: Any, *, indent: int | None = 1) -> Path:
    """JSON as JSON: NaN and infinities are refused (they are not JSON) rather than written."""
    try:
        text = json.dumps(data, indent=indent, allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"{path}: cannot write {exc} (NaN and infinity are not JSON)") from None
    return atomic_write_text(path, text + "\n")


# ---------------------------------------------------------------------------- output checks
def check_output(
    path: str | Path, *, inputs: Iterable[str | Path | None] = (), suffixes: Iterable[str] = (),
    what: str = "-o", kind: str = "file",
) -> Path:
    """Refuse, before any work, an output that cannot or must not be written.

    ``suffixes``: the names the written format may have (e.g. ``(".json",)``); ``kind``:
    ``"file"`` or ``"folder"``. Returns the path.
    """
    path = Path(path)
    allowed = tuple(suffixes)
    if kind == "file":
        if path.is_dir():
            raise OutputPathError(f"{what} {path}: is a folder; give a file name inside it")
        if allowed and path.suffix.lower() not in allowed:
            raise OutputPathError(
                f"{what} {path}: the file written is {'/'.join(allowed)}; name it so "
                f"(e.g. {path.with_suffix(allowed[0]).name})")
        if path.exists() and not path.is_file():
            raise OutputPathError(f"{what} {path}: exists and is not a regular file")
        if path.exists() and not path.stat().st_mode & 0o222:
            raise OutputPathError(f"{what} {path}: exists and is read-only")
    elif path.exists() and not path.is_dir():
        raise OutputPathError(f"{what} {path}: is a file; give a folder")
    for given in inputs:
        if given is not None and _same_file(path, Path(given)):
            raise OutputPathError(
                f"{what} {path}: is also an input of this command; write to another file")
    folder = path if kind == "folder" else path.parent
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise OutputPathError(f"{what} {path}: {existing} is a file, not a folder")
    try:  # a real probe: permissions, read-only file systems, root or not
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".zbsolve-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputPathError(f"{what} {path}: cannot write in {existing} ({exc.strerror})") \
            from None
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        return False
    return a.resolve() == b.resolve()


def check_inputs_untouched(outputs: Iterable[str | Path], inputs: Iterable[str | Path]) -> None:
    """For commands that write several files: none of them may be one of the inputs."""
    for out in outputs:
        for given in inputs:
            if _same_file(Path(out), Path(given)):
                raise OutputPathError(f"{out}: would overwrite the input {given}")


# ---------------------------------------------------------------------------- reading
def read_text(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of a file, or an InputFileError naming it (missing, a folder, unreadable,
    too large, not text)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputFileError(f"{what} {str(path)!r} does not exist") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read: {exc.strerror}") from None
    if path.is_dir():
        raise InputFileError(f"{path}: is a folder, not a file ({what})")
    if size > MAX_INPUT_BYTES:
        raise InputFileError(
            f"{path}: {size} bytes is over the {MAX_INPUT_BYTES} bytes an input may have")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_constant(name: str) -> Any:
    raise _BadConstant(name)


class _BadConstant(ValueError):
    pass


def parse_json(text: str, where: str) -> Any:
    """JSON text -> data; duplicate keys, NaN and Infinity are errors naming ``where``."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _DuplicateKey as exc:
        raise InputFileError(f"{where}: duplicate key {exc.key!r} in a JSON object") from None
    except _BadConstant as exc:
        raise InputFileError(f"{where}: {exc} is not a JSON number; write a finite number") \
            from None
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{where}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise InputFileError(f"{where}: JSON nested too deeply") from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with JSON's data types: YAML 1.2 numbers, true/false, null; no dates; no
    duplicate keys."""


# YAML 1.1's implicit resolvers read 6e-05 as a string and 2024-01-01 as a date; start from none
_StrictLoader.yaml_implicit_resolvers = {}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark) from None
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
    return out


def _refuse_tag(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"{node.tag} values are not JSON data; quote the value", node.start_mark)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
for _tag in ("timestamp", "binary", "set", "omap", "pairs"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> JSON data (see the module docstring); errors name ``where``."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputFileError(f"{where}: not valid YAML: {at}{problem}") from None
    except RecursionError:
        raise InputFileError(f"{where}: YAML nested too deeply") from None


def read_data(path: str | Path, what: str = "file") -> Any:
    """A JSON (``.json``) or YAML (any other name) file as data; InputFileError names it."""
    path = Path(path)
    text = read_text(path, what)
    if path.suffix.lower() == ".json":
        return parse_json(text, str(path))
    return parse_yaml(text, str(path))


def json_data_errors(value: Any, where: str) -> list[str]:
    """Why ``value`` is not plain JSON data (string keys, finite numbers, no other types)."""
    if value is None or isinstance(value, (str, bool, int)):
        return []
    if isinstance(value, float):
        return [] if value == value and abs(value) != float("inf") else [
            f"{where}: {value} is not a JSON number"]
    if isinstance(value, (list, tuple)):
        return [e for i, v in enumerate(value) for e in json_data_errors(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if not isinstance(k, str):
                out.append(f"{where}: key {k!r} is not a string")
            else:
                out += json_data_errors(v, f"{where}.{k}")
        return out
    return [f"{where}: a {type(value).__name__} is not JSON data (write it as a string)"]
