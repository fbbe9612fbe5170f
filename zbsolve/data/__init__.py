"""Files shipped with the package: the published reference tables and the instance files.

The tests and ``zbsolve bench`` read the papers' figures (``reference/``, see its README for the
sources) and the instances of those settings (``instances/``, the repository's ``instances/``
folder, packaged under this name) from here, never from a path outside the package, so they
work the same from a checkout, an editable install and an installed wheel. No torch, no solver:
this module only locates files.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

REFERENCE_FILES = (
    "zb_iclr_bubble_rates.csv",
    "zbv_arxiv_bubble_rates.csv",
    "vshape_unit_cost.csv",
    "torch-artifacts/dualpipev_4rank_10mb.csv",
)


def _root() -> Path:
    # pip installs packages unpacked, so the package's files are plain files on disk
    return Path(str(files(__name__)))


def reference_dir() -> Path:
    """The folder of the published tables."""
    return _root() / "reference"


def reference_path(name: str) -> Path:
    """One published table by its file name (one of ``REFERENCE_FILES``)."""
    if name not in REFERENCE_FILES:
        raise FileNotFoundError(
            f"no reference table {name!r}; shipped: {', '.join(REFERENCE_FILES)}")
    return reference_dir() / name


def instances_dir() -> Path:
    """The shipped instance files (``seed/``, ``zb-iclr/``, ``zbv-arxiv/``, ``vshape/``, ...)."""
    return _root() / "instances"


def instance_path(relative: str) -> Path:
    """A shipped instance file by its path under ``instances/``, e.g. ``seed/teaching-p4-m8.yaml``."""
    path = instances_dir() / relative
    if not path.is_file():
        raise FileNotFoundError(f"no shipped instance {relative!r} under {instances_dir()}")
    return path
