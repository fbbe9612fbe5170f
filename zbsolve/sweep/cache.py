"""The per-case cache: one JSON file per solved case, named by a hash of what determines it.

The key covers the instance as the solver sees it (times, memory, limit, layout; not its name or
description, which change nothing), every solver parameter, and the code version (zbsolve's
version and a digest of the modules that decide a case's answer), so a rerun, or a finer sweep
that shares some limits, finds earlier answers, and a changed solver never reuses the answers of
the old one. Files are written to a temporary name and renamed, so a sweep killed mid-write never
leaves a half file. An entry is still only a claim: the sweep re-simulates its schedule before
using it (``zbsolve.sweep.runner``), and a file that is not a valid entry is reported and solved
again.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from zbsolve.instance import Instance
from zbsolve.io import InputFileError, parse_json, read_text, write_json

CACHE_VERSION = 2
_IGNORED = ("name", "description", "source", "meta")
# the modules whose code decides what a case's answer is
_DECIDING = ("ops.py", "instance.py", "graph.py", "numeric.py", "schedule.py", "simulate.py", "solver",
             "baselines", "sweep/runner.py")


class CacheEntryError(ValueError):
    """A cache file that is not a valid entry; the message names the file and why."""


@functools.cache
def code_version() -> str:
    """``<zbsolve version>+<digest of the deciding modules' source>``."""
    import zbsolve

    root = Path(zbsolve.__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _DECIDING:
        path = root / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes())
    return f"{zbsolve.__version__}+{digest.hexdigest()[:12]}"


def case_key(inst: Instance, params: dict[str, Any]) -> str:
    data = {k: v for k, v in inst.to_dict().items() if k not in _IGNORED}
    blob = json.dumps({"v": CACHE_VERSION, "code": code_version(), "instance": data,
                       "solver": params}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def read(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The entry of ``key``, None when there is none; CacheEntryError when the file is not a
    valid entry (unreadable, not JSON, or not shaped as one)."""
    path = cache_dir / f"{key}.json"
    if not path.exists():
        return None
    try:
        data = parse_json(read_text(path, "cache file"), str(path))
    except InputFileError as exc:
        raise CacheEntryError(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("row"), dict) \
            or not isinstance(data.get("schedule", None), (dict, type(None))):
        raise CacheEntryError(f"{path}: not a cache entry (expected an object with 'row' and "
                              "'schedule')")
    return data


def write_atomic(cache_dir: Path, key: str, payload: dict[str, Any]) -> Path:
    """Write one entry atomically (temp file beside it, fsync, rename)."""
    return write_json(cache_dir / f"{key}.json", payload, indent=None)
