"""``python -m analysis <subcommand> ...``: thin launcher over importable analysis functions.

Subcommands are registered in :data:`SUBCOMMANDS` as ``name -> (help, add_args, run)``:
``add_args(parser)`` declares the subcommand's arguments and ``run(args) -> int`` does the work
and returns the exit status. To add one, write those two functions in the module that owns the
analysis and add a line here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from analysis import interrupt

if __name__ == "__main__":  # before the subcommands' imports bring in JAX (analysis.interrupt says why)
    interrupt.install()

from analysis import links, report, rules  # noqa: E402
from analysis.costmodel import cli as costmodel_cli  # noqa: E402
from analysis.scaling import cli as scaling_cli  # noqa: E402

Subcommand = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]

SUBCOMMANDS: dict[str, Subcommand] = {
    "report": (report.HELP, report.add_args, report.run),
    "scaling": (scaling_cli.HELP, scaling_cli.add_args, scaling_cli.run),
    "links": (links.HELP, links.add_args, links.run),
    "costmodel": (costmodel_cli.HELP, costmodel_cli.add_args, costmodel_cli.run),
    "whatif": (costmodel_cli.WHATIF_HELP, costmodel_cli.add_whatif_args, costmodel_cli.run_whatif),
    "rules": (rules.HELP, rules.add_args, rules.run),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_args, run) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        interrupt.check()
        status = int(args._run(args) or 0)
        interrupt.check()  # a Ctrl-C the command never saw (analysis.interrupt)
    except KeyboardInterrupt:
        print(f"{args.command}: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
