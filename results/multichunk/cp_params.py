"""The PARAMS-JSON argument of the probe scripts (``zbv_proof.py``, ``relax_probe.py``):
CP-SAT parameters as a JSON object, or one usage line and exit code 1."""

from __future__ import annotations

import json
import sys
from typing import Any


def parse(text: str | None, usage: str) -> dict[str, Any]:
    """``text`` as a JSON object ({} when None); exits with ``usage`` and the reason otherwise.
    Whether each key is a CP-SAT parameter of the right type is checked where the solver is
    built (``cpsat.new_solver`` raises AttributeError / TypeError / ValueError)."""
    if text is None:
        return {}
    try:
        params = json.loads(text)
    except json.JSONDecodeError as err:
        sys.exit(f"{usage}: PARAMS-JSON: {err}")
    if not isinstance(params, dict):
        sys.exit(f"{usage}: PARAMS-JSON: expected an object, got {text!r}")
    return params
