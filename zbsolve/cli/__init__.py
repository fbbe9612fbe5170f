"""``zbsolve`` command line: one subcommand per step of the data path.

instance -> baselines | solve -> check / show -> export -> run; plus profile, loop, sweep, bench.
Each subcommand lives in its own module with ``register(subparsers)``; heavy imports (ortools,
torch, matplotlib) happen inside the handlers so ``zbsolve --help`` stays instant.

Conventions every subcommand keeps: ``--json`` prints one JSON document on stdout, errors
included (``{"error": ..., "command": ...}``, exit code 2); without it errors are one line on
stderr. Argument errors print the subcommand's own usage. Every flag's help names its default.
"""

from __future__ import annotations

import sys

from zbsolve import __version__

COMMANDS = ("baselines", "solve", "check", "show", "export", "run", "profile", "loop", "sweep",
            "bench", "plan")


def build_parser():
    import importlib

    from zbsolve.cli.common import DefaultsFormatter, Parser

    parser = Parser(
        prog="zbsolve", formatter_class=DefaultsFormatter,
        description="Pipeline-parallel schedule optimizer (zero-bubble family, CP-SAT)",
    )
    parser.add_argument("--version", action="version", version=f"zbsolve {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"zbsolve.cli.{name}").register(sub)
    for command_parser in sub.choices.values():
        command_parser.formatter_class = DefaultsFormatter
    parser.commands = sub.choices  # name -> subcommand parser, for argument errors
    return parser


def main(argv: list[str] | None = None) -> int:
    from zbsolve.cli.common import Parser, run_handler

    argv = sys.argv[1:] if argv is None else list(argv)
    Parser.json_errors = "--json" in argv
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the subcommand, with its own usage, not by the top level
            parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return run_handler(args)
    finally:
        Parser.json_errors = False


if __name__ == "__main__":
    sys.exit(main())
