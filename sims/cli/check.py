"""`weakspots check`: the agreement table, theory vs reduced flow vs finite-d flow vs SGD."""

from __future__ import annotations

import argparse
import time

from weakspots.sims.check import agreement_rows

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check",
        help="agreement table: every prediction against the flows and SGD (exit 1 on a failure)",
        description="One row per prediction: name, config, predicted, ODE, SGD, relative "
        "error, tolerance, pass. Exit code 1 if any row fails.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer configs and samples")
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rows = agreement_rows(args.quick, progress=common.progress_enabled(args))
    wall = time.perf_counter() - start
    if args.json:
        common.print_json({"rows": rows, "wall_seconds": wall})
    else:
        print(text_report(rows, wall))
    return 0 if all(r["pass"] for r in rows) else 1


def _value(v):
    return None if v is None else float(f"{v:.6g}")


def text_report(rows: list[dict], wall: float) -> str:
    headers = ["prediction", "config", "predicted", "ode", "sgd", "rel_error", "tol", "pass"]
    cells = [
        [
            r["name"],
            r["config"],
            *(_value(r[k]) for k in ("predicted", "ode", "sgd", "rel_error", "tolerance")),
            "pass" if r["pass"] else "FAIL",
        ]
        for r in rows
    ]
    failed = sum(not r["pass"] for r in rows)
    table = common.table(headers, cells, ".6g")
    return f"{table}\n{len(rows)} rows, {failed} failed ({wall:.0f}s)"
