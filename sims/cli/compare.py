"""`weakspots compare`: operators (or mitigations) under one training budget, over seeds."""

from __future__ import annotations

import argparse
import dataclasses

from weakspots.idealized.config import OPERATORS
from weakspots.sims.interventions import MITIGATIONS, compare_mitigations, compare_operators
from weakspots.sims.train import stderr_progress

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare compression operators or mitigations: delta_max, psc, mean accuracy",
        description="Train each operator (or mitigation) with the same steps, batch and lr over "
        "seeds; print delta_max, psc and mean accuracy with 95% intervals.",
    )
    common.add_train_flags(parser)
    parser.add_argument(
        "--operators", default=None, help=f"comma-separated, from {', '.join(OPERATORS)}"
    )
    parser.add_argument(
        "--mitigations",
        default=None,
        help=f"comma-separated, from {', '.join(MITIGATIONS)} (each against the train flags)",
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def _names(flag: str, value: str, allowed) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise common.UsageError(
            f"{flag}: unknown or empty {bad or value!r}; choose from {', '.join(allowed)}"
        )
    return names


def run(args: argparse.Namespace) -> int:
    base = common.train_config(args)
    seeds = common.seed_list(args)
    if (args.operators is None) == (args.mitigations is None):
        raise common.UsageError("--operators: give exactly one of --operators or --mitigations")
    progress = stderr_progress("compare") if common.progress_enabled(args) else None
    if args.operators is not None:
        rows = compare_operators(
            base, _names("--operators", args.operators, OPERATORS), seeds, progress
        )
        key = "operators"
    else:
        names = _names("--mitigations", args.mitigations, tuple(MITIGATIONS))
        rows = compare_mitigations(base, {n: MITIGATIONS[n] for n in names}, seeds, progress)
        key = "mitigations"
    report = {"config": dataclasses.asdict(base), "seeds": seeds, key: rows}
    if args.json:
        common.print_json(report)
    else:
        print(text_report(rows))
    return 0


def _cell(stat: dict) -> str:
    return f"{stat['mean']:.3f} [{stat['ci'][0]:.3f}, {stat['ci'][1]:.3f}]"


def text_report(rows: dict) -> str:
    headers = ["name", "delta_max", "psc", "mean accuracy", "predicted delta_max", "phases"]
    table = []
    for name, row in rows.items():
        if "diverged" in row:
            table.append([name, row["diverged"], None, None, None, None])
            continue
        predicted = row.get("predicted_delta_max")
        table.append(
            [
                name,
                _cell(row["delta_max"]),
                _cell(row["psc"]),
                _cell(row["mean_accuracy"]),
                None if predicted is None else _cell(predicted),
                common.sparkline(row["phase_accuracy"]),
            ]
        )
    return common.table(headers, table)
