"""The per-case cache: one JSON file per solved case, named by a hash of what determines it.

The key covers the instance as the solver sees it (times, memory, limit, layout; not its name or
description, which change nothing) and every solver parameter, so a rerun, or a finer sweep that
shares some limits, finds earlier answers. Files are written to a temporary name and renamed, so a
sweep killed mid-write never leaves a half file that a rerun would trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from zbsolve.instance import Instance

CACHE_VERSION = 1
_IGNORED = ("name", "description", "source", "meta")


def case_key(inst: Instance, params: dict[str, Any]) -> str:
    data = {k: v for k, v in inst.to_dict().items() if k not in _IGNORED}
    blob = json.dumps({"v": CACHE_VERSION, "instance": data, "solver": params}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def read(cache_dir: Path, key: str) -> dict[str, Any] | None:
    path = cache_dir / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:  # not ours (writes are atomic): solve again and overwrite
        return None


def write_atomic(cache_dir: Path, key: str, payload: dict[str, Any]) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{key}.json"
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{key}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
