"""The issue's explicit snake (``issue_examples.snake``: three chunks per device, p = 4,
m = 12) solved with several seeds, with the model's time scale: the thirty-fifth pass compares
the code before exact fraction scales (``model._fraction_scale``; a worktree on PYTHONPATH)
with the code after.

    python results/multichunk/snake_scale.py [--progress] SECONDS SEED...

``--progress``: the solver's progress lines on stderr.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from issue_examples import snake  # noqa: E402
from scale_ab import summary  # noqa: E402

from zbsolve.solver.api import SolveOptions, solve  # noqa: E402

USAGE = "usage: snake_scale.py [--progress] SECONDS SEED..."


def main(argv: list[str]) -> int:
    progress = argv[:1] == ["--progress"]
    argv = argv[1:] if progress else argv
    try:
        seconds, seeds = float(argv[0]), [int(s) for s in argv[1:]]
    except (IndexError, ValueError):
        seconds, seeds = -1.0, []
    if not (0 < seconds and math.isfinite(seconds)) or not seeds:
        print(f"{USAGE} (got {argv})", file=sys.stderr)
        return 2
    for seed in seeds:
        res = solve(snake(), SolveOptions(time_limit=seconds, objective="makespan", seed=seed,
                                          progress=progress))
        print(summary(res, seed=seed, time_limit=seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
