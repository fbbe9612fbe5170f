"""``zbsolve`` command line: one subcommand per step of the data path.

instance -> baselines | solve -> check / show -> export -> run; plus profile, loop, sweep, bench.
Each subcommand lives in its own module with ``register(subparsers)``; heavy imports (ortools,
torch, matplotlib) happen inside the handlers so ``zbsolve --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("baselines", "solve", "check", "show", "export", "run", "profile", "loop", "sweep",
            "bench")


class OneLineParser(argparse.ArgumentParser):
    """argparse with a usage error on one line (the flag, the problem, where help is), like every
    other zbsolve error, instead of the usage block first."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="zbsolve", description="Pipeline-parallel schedule optimizer (zero-bubble family, CP-SAT)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"zbsolve.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from zbsolve.cli.common import run_handler

    return run_handler(args)


if __name__ == "__main__":
    sys.exit(main())
