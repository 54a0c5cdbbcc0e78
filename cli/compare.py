"""`weakspots compare`: operators (or mitigations) under one training budget, over seeds."""

from __future__ import annotations

import argparse
import dataclasses

from weakspots.idealized.operators.base import TOY
from weakspots.idealized.operators.registry import operator_names
from weakspots.sims.toy.interventions import (
    MITIGATIONS,
    compare_mitigations,
    compare_operators,
    mitigation_configs,
    operator_configs,
)

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare compression operators or mitigations: delta_max, psc, mean accuracy",
        description="Train each operator (or mitigation) with the same steps, batch and lr over "
        "seeds; print delta_max, psc and mean accuracy, each with a 95% interval across seeds "
        "inside the range the statistic can take (accuracy: inside [0, 1]).",
        epilog=common.examples(
            "weakspots compare --operators softmax_pool,mean_pool,linear --seeds 3",
            "weakspots compare --mitigations baseline,overlap,offset_ensemble --seeds 4 --json",
        ),
    )
    common.add_train_flags(parser)
    group = parser.add_argument_group("what to compare (give one)")
    group.add_argument(
        "--operators", default=None, help=f"comma-separated, from {', '.join(operator_names(TOY))}"
    )
    group.add_argument(
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
    if args.operators is not None:
        key, names = "operators", _names("--operators", args.operators, operator_names(TOY))
        planned = operator_configs(base, names, seeds)
    else:
        key, names = "mitigations", _names("--mitigations", args.mitigations, tuple(MITIGATIONS))
        mitigations = {n: MITIGATIONS[n] for n in names}
        planned = mitigation_configs(base, mitigations, seeds)
    configs = [c for group in planned.values() for c in group]
    with common.train_progress(args, "compare", configs) as progress:
        if key == "operators":
            rows = compare_operators(base, names, seeds, progress)
        else:
            rows = compare_mitigations(base, mitigations, seeds, progress)
    samples = base.stride * base.eval_samples  # held-out needles behind a run's mean accuracy
    rows = {name: with_intervals(row, samples) for name, row in rows.items()}
    report = {"config": dataclasses.asdict(base), "seeds": seeds, key: rows}
    if args.json:
        common.print_json(report)
    else:
        print(text_report(rows))
    return 0


def with_intervals(row: dict, samples: int) -> dict:
    """`row` with every across-seed statistic's interval (`common.interval`) inside its range.

    A measured accuracy's interval is `proportion_interval` on `samples` needles per run;
    predicted ones (`predicted_*`) and the others are t intervals cut to their range.
    """
    out = dict(row)
    for key, stat in row.items():
        if isinstance(stat, dict) and "values" in stat:
            predicted = key.startswith("predicted_")
            name = key.removeprefix("predicted_")
            out[key] = common.interval(name, stat["values"], None if predicted else samples)
    return out


def _cell(stat: dict) -> str:
    return common.format_interval(stat)


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
