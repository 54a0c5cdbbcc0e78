"""The `weakspots` command line: one tool, one verb per module in this package.

Every verb module defines `register(subparsers)` (adding its parser, with `run` as the
`handler` default) and reads its flags through `sims.cli.common`, so the verbs share
flag names and output conventions: a readable table by default, `--json` for
machines, exit code 2 with one line naming the flag for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from weakspots.idealized.config import ConfigError

from .common import UsageError

VERBS = ("train", "predict", "flow", "check", "ablate", "compare", "sweep", "bench", "lm")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="weakspots", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for verb in VERBS:
        if importlib.util.find_spec(f"weakspots.sims.cli.{verb}") is not None:
            importlib.import_module(f"weakspots.sims.cli.{verb}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ConfigError, UsageError) as error:
        print(f"weakspots {args.verb}: error: {error}", file=sys.stderr)
        return 2
