"""`weakspots check`: the agreement table, theory vs reduced flow vs finite-d flow vs SGD."""

from __future__ import annotations

import argparse
import time

from weakspots.sims.experiments import (
    EXPERIMENTS,
    evaluate,
    failing,
    kind_counts,
    train_planned,
)
from weakspots.sims.progress import Progress

from . import common


def register(subparsers) -> None:
    names = [e.name for e in EXPERIMENTS]
    parser = subparsers.add_parser(
        "check",
        help="agreement table: every prediction against the flows and SGD (exit 1 on a failure)",
        description="One row per comparison: experiment, kind (prediction, consistency, fit), "
        "name, config, predicted, ODE, SGD, relative error, tolerance, pass. By default the "
        "experiments without a figure (paper_repro.py draws the rest); --all adds those. "
        "Exit code 1 if any row fails.",
        epilog=common.examples(
            "weakspots check --quick", "weakspots check --quick --json > rows.json"
        ),
    )
    parser.add_argument("--quick", action="store_true", help="fewer configs and samples")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--all", action="store_true", help="every experiment, those with a figure included"
    )
    which.add_argument(
        "--only", nargs="+", metavar="NAME", choices=names, help=f"one of: {', '.join(names)}"
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    size = "quick" if args.quick else "full"
    if args.only:
        chosen = [e for e in EXPERIMENTS if e.name in args.only]
    else:
        chosen = [e for e in EXPERIMENTS if args.all or not e.drawn]
    rows = []
    enabled = common.progress_enabled(args)
    with Progress("check", "experiments", total=len(chosen), enabled=enabled) as progress:
        train_planned(chosen, size, log=progress.write)
        for experiment in chosen:
            evaluation = evaluate(experiment, size)
            rows += [{"experiment": experiment.name, **r.as_dict()} for r in evaluation.rows]
            progress.update(1)
    wall = time.perf_counter() - start
    if args.json:
        common.print_json({"rows": rows, "counts": kind_counts(rows), "wall_seconds": wall})
    else:
        print(text_report(rows, wall))
    return 1 if any(failing(r) for r in rows) else 0


def _value(v):
    return None if v is None else float(f"{v:.6g}")


def text_report(rows: list[dict], wall: float) -> str:
    headers = [
        "kind",
        "prediction",
        "config",
        "predicted",
        "ode",
        "sgd",
        "rel_error",
        "tol",
        "pass",
    ]
    cells = [
        [
            r["kind"],
            r["name"],
            r["config"],
            *(_value(r[k]) for k in ("predicted", "ode", "sgd", "rel_error", "tolerance")),
            ("held" if r["pass"] else "not held")
            if r.get("finding")
            else ("pass" if r["pass"] else "FAIL"),
        ]
        for r in rows
    ]
    table = common.table(headers, cells, ".6g")
    by_kind = kind_counts(rows)
    predictions = by_kind["prediction"]
    summary = ", ".join(f"{c['rows']} {k} ({c['failing']} failing)" for k, c in by_kind.items())
    return (
        f"{table}\n{predictions['rows']} predictions, {predictions['failing']} failing; "
        f"{len(rows)} rows in all: {summary} ({wall:.0f}s)"
    )
