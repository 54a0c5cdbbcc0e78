"""The `weakspots` command line: one tool, one verb per module in this package.

Every verb module defines `register(subparsers)` (adding its parser, with `run` as the
`handler` default) and reads its flags through `sims.cli.common`, so the verbs share
flag names and output conventions: a readable table by default, `--json` for
machines, exit code 2 with one line naming the flag for bad input, exit code 1 with one
line naming the error for a failed computation (a diverged run, a failed solve, a
damaged store, memory exhausted).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

from weakspots import __version__
from weakspots.idealized.precision import float64
from weakspots.idealized.toy.config import ConfigError

from .common import HelpFormatter, UsageError, enable_compilation_cache

VERBS = ("train", "predict", "flow", "check", "ablate", "compare", "sweep", "plot", "bench", "lm", "probe")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2; help shows defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="weakspots", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for verb in VERBS:
        if importlib.util.find_spec(f"weakspots.sims.cli.{verb}") is not None:
            importlib.import_module(f"weakspots.sims.cli.{verb}").register(subparsers)
    return parser


@float64  # as every verb computed before jax's 64-bit switch left import time
def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default `sys.argv[1:]`); returns the exit code.

    Run as a program (`argv` None), JAX's persistent compilation cache is on
    (`common.compilation_cache_dir`). Ctrl-C ends any verb with one line and code 130.
    """
    prog = "weakspots"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        prog = f"weakspots {args.verb}"
        if argv is None:
            enable_compilation_cache()
        try:
            return int(args.handler(args) or 0)
        except (ConfigError, UsageError) as error:
            print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
            return 2
        except Exception as error:
            if not failed_computation(error):
                raise  # a bug: its traceback is the report
            print(f"{prog}: error: {type(error).__name__}: {_one_line(error)}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`weakspots ... | head`): stop quietly, as Unix
        # tools do, and keep Python's exit-time flush from raising a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def failed_computation(error: BaseException) -> bool:
    """Whether `error` reports a computation that failed rather than a bug.

    Those are the RuntimeErrors weakspots raises for a failed computation
    (`TrainingDiverged`, a flow's failed solve, `StoreError`), arithmetic that overflowed,
    and memory exhausted (the host's, or a device's as XLA reports it).
    """
    if isinstance(error, MemoryError | OverflowError | FloatingPointError):
        return True
    if isinstance(error, RuntimeError) and type(error).__module__.startswith("weakspots."):
        return True
    return isinstance(error, RuntimeError) and "RESOURCE_EXHAUSTED" in str(error)


def _one_line(error: BaseException, limit: int = 400) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
