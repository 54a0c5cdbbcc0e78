"""`weakspots plot STORE --x X --y Y [--hue H]`: a sweep's results as a PNG."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="plot a sweep's result store: y against x, one line per hue (PNG)",
        description="Plot one column of a result store against another, one line per value of "
        "--hue: every run a faint point, the mean over runs that share x and hue (e.g. seeds) "
        "with its 95% interval. A list column such as phase_accuracy is read one entry at a "
        "time (phase_accuracy[3]) or whole against its position (--x phase); per-head lists "
        "(support_size, final_gain, specialization_index) against --x head or --hue head.",
        epilog=common.examples(
            "weakspots plot results/tiny --x gain --y delta_max --hue operator",
            "weakspots plot results/tiny --x phase --y phase_accuracy --hue gain "
            "--where operator=softmax_pool",
            "weakspots plot results/tiny --x gain --y 'phase_accuracy[0]' --out phase0.png",
        ),
    )
    parser.add_argument("store", help="result store directory (written by weakspots sweep)")
    parser.add_argument("--x", required=True, help="column on the horizontal axis")
    parser.add_argument("--y", required=True, help="column on the vertical axis")
    parser.add_argument("--hue", default=None, help="column whose values get one line each")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep only runs with this value (repeatable), e.g. --where stride=8",
    )
    parser.add_argument("--logx", action="store_true", help="logarithmic x axis")
    parser.add_argument("--logy", action="store_true", help="logarithmic y axis")
    parser.add_argument(
        "--out",
        default=None,
        help="PNG to write (default: Y_vs_X[_by_HUE].png in the current folder)",
    )
    parser.set_defaults(handler=run)


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_where(items: list[str]) -> dict:
    where = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise common.UsageError(f"--where: expected KEY=VALUE, got {item!r}")
        where[key.strip()] = _value(value.strip())
    return where


def default_out(x: str, y: str, hue: str | None) -> Path:
    def slug(name):
        return re.sub(r"\W+", "", name.replace("[", "_"))

    return Path(f"{slug(y)}_vs_{slug(x)}" + (f"_by_{slug(hue)}" if hue else "") + ".png")


def run(args: argparse.Namespace) -> int:
    where = parse_where(args.where)
    out = Path(args.out) if args.out else default_out(args.x, args.y, args.hue)
    if out.suffix.lower() != ".png":
        raise common.UsageError(f"--out: must end in .png, got {str(out)!r}")
    if not Path(args.store).is_dir():
        raise common.UsageError(f"store: no result store at {args.store}")
    # matplotlib loads only when this verb runs
    from weakspots.figures.sweep_plot import PlotError, plot_store, save

    try:
        fig = plot_store(
            args.store, args.x, args.y, args.hue, where=where, logx=args.logx, logy=args.logy
        )
    except PlotError as error:
        arg, _, message = str(error).partition(": ")
        flag = f"--{arg}" if arg in ("x", "y", "hue", "where") else "store"
        raise common.UsageError(f"{flag}: {message}") from None
    save(fig, out)
    print(out)
    return 0
