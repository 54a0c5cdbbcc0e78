"""The `weakspots` command line: one tool, one verb per module in this package.

Every verb module defines `register(subparsers)` (adding its parser, with `run` as the
`handler` default) and reads its flags through `cli.common`, so the verbs share
flag names and output conventions: a readable table by default, `--json` for
machines, exit code 2 with one line naming the flag for bad input, exit code 1 with one
line naming the error for a failed computation (a diverged run, a failed solve, a
damaged store, memory exhausted).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from weakspots import __version__
from weakspots.errors import ConfigError, UsageError

from .parser import Parser

VERBS = ("train", "predict", "flow", "check", "ablate", "compare", "sweep", "plot", "bench", "lm", "probe")
# Each verb's one line in `weakspots --help`, shown without importing the verb (its module
# imports jax, seconds); the verb's own parser says the same (tests/cli/test_cli_common.py).
SUMMARIES = {
    "train": "train retrieval models with chunk-compressed keys",
    "predict": "theory's predictions: threshold, growth rate, support size, accuracy, t*",
    "flow": "integrate the reduced (d = infinity) gradient flow",
    "check": "agreement table: every prediction against the flows and SGD (exit 1 on a failure)",
    "ablate": "head ablation, pooling-weight and activation patching: heads x phases effects",
    "compare": "compare compression operators or mitigations: delta_max, psc, mean accuracy",
    "sweep": "run a TOML grid of train/flow runs into a result store",
    "plot": "plot a sweep's result store: y against x, one line per hue (PNG)",
    "bench": "benchmark the trainer and the flow against baselines and the machine's limit",
    "lm": "decoders with compressed attention trained from scratch (lm train)",
    "probe": "phase scan of a real model: needle and prompt end at exact token offsets",
}


def build_parser(imported: tuple[str, ...] = VERBS) -> Parser:
    """The command line's parser, with the full parsers of the verbs `imported` and the
    others listed by their summary only, so that parsing one verb imports one verb module."""
    parser = Parser(prog="weakspots", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for name in VERBS:
        if importlib.util.find_spec(f"weakspots.cli.{name}") is None:
            continue
        if name in imported:
            importlib.import_module(f"weakspots.cli.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=SUMMARIES.get(name, ""))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default `sys.argv[1:]`); returns the exit code.

    Run as a program (`argv` None), JAX's persistent compilation cache is on
    (`common.compilation_cache_dir`). Ctrl-C ends any verb with one line and code 130.
    Only the verb given is imported; it runs with 64-bit jax types on (`float64`), as every
    verb computed before jax's 64-bit switch left import time.
    """
    prog = "weakspots"
    words = sys.argv[1:] if argv is None else argv
    verb = next((w for w in words if not w.startswith("-")), None)
    try:
        parser = build_parser((verb,) if verb in VERBS else ())
        args = parser.parse_args(argv)
        sub_verb = getattr(args, "lm_verb", None)  # `weakspots lm train`'s `train`
        prog = f"weakspots {args.verb}" + (f" {sub_verb}" if sub_verb else "")
        from weakspots.idealized.precision import float64

        from .common import enable_compilation_cache

        if argv is None:
            enable_compilation_cache()
        try:
            return int(float64(args.handler)(args) or 0)
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
