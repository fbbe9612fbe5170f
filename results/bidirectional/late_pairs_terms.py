"""The analytic bound of the bench's overlapped rows with and without the two terms of issue
18's "Overlapped pairs start late" (docs/solver.md): before them (a W at its pair share), with
the second pass over the heads (``bounds._alone_until_paired``), and with the per-device term
as well (``bounds._late_pairs_bound``, the default).

    python results/bidirectional/late_pairs_terms.py
"""

from __future__ import annotations

from unittest import mock

from zbsolve.bench import build_cases
from zbsolve.solver import bounds


def main() -> None:
    print("case | before | heads | both")
    for c in build_cases():
        if c.inst.overlap is None:
            continue
        both = bounds.analytic_bound(c.inst, c.objective)
        with mock.patch.object(bounds, "_paired", lambda *a: 0.0):
            heads = bounds.analytic_bound(c.inst, c.objective)
            with mock.patch.object(bounds, "_alone_until_paired",
                                   lambda graph, e, head, dur: head):
                before = bounds.analytic_bound(c.inst, c.objective)
        print(f"{c.id} | {before:.2f} | {heads:.2f} | {both:.2f}")


if __name__ == "__main__":
    main()
