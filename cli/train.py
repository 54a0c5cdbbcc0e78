"""`weakspots train`: train one model (or K seeds at once) and report per-phase accuracy."""

from __future__ import annotations

import argparse

from weakspots.sims.toy.train import train_many

from . import common, induction, mechanisms


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train retrieval models with chunk-compressed keys",
        description="Train the idealized retrieval model; print per-phase accuracy with 95% "
        "intervals (with --seeds K, each seed's summary and the mean and interval across seeds).",
        epilog=common.examples(
            "weakspots train",
            "weakspots train --chunks 12 --seeds 4",
            "weakspots train --operator mean_pool --heads 4 --steps 1000 --json > run.json",
        ),
    )
    common.add_train_flags(parser)
    mechanisms.add_model_kind_flags(parser, predict=False)
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.model == "induction":
        return induction.run_train(args)
    base = mechanisms.train_config(args)
    seeds = common.seed_list(args)
    configs = [base.replace(seed=s) for s in seeds]
    with common.train_progress(args, "train", configs) as progress:
        summaries = [r.summary() for r in train_many(configs, progress=progress)]
    many = args.seeds is not None
    if args.json:
        common.print_json(json_report(base, seeds, summaries, many=many))
    elif many:
        print(seeds_report(base, seeds, summaries))
    else:
        print(text_report(base, seeds[0], summaries[0]))
    return 0


def json_report(base, seeds: list[int], summaries: list[dict], *, many: bool) -> dict:
    """`config` plus each metric: a value per run (a list over seeds when `many`).

    When `many`, `across_seeds` holds the mean and 95% interval across seeds
    (`common.across_seeds`).
    """
    out = common.per_seed_report(base, seeds, summaries, many=many)
    if many:
        out["across_seeds"] = common.across_seeds(base, summaries)
    return out


def _title(base, seed: str) -> str:
    return (
        f"s={base.stride} N={base.chunks} d={base.dim} H={base.heads} gain={base.gain:g} "
        f"{base.operator} {base.loss} {base.optimizer} lr={base.lr:g} steps={base.steps} {seed}"
    )


def _support(summary: dict) -> str:
    sizes = summary["support_size"]
    return "-" if sizes is None else ",".join(map(str, sizes))


def text_report(base, seed: int, s: dict) -> str:
    """One run: per phase its accuracy, 95% Wilson interval and pooling weight per head."""
    weights = s["pooling_weights"]
    rows = []
    for phase, (acc, ci) in enumerate(
        zip(s["phase_accuracy"], s["phase_accuracy_ci"], strict=True)
    ):
        row = [phase, acc, f"[{ci[0]:.3f}, {ci[1]:.3f}]"]
        if weights is not None:
            row += [w[phase] for w in weights]
        rows.append(row)
    headers = ["phase", "accuracy", "95% CI"]
    if weights is not None:
        headers += [f"weight h{h}" for h in range(len(weights))]
    return "\n".join(
        [
            _title(base, f"seed={seed}"),
            common.table(headers, rows),
            f"phase accuracy {common.sparkline(s['phase_accuracy'])}  "
            f"mean {s['mean_accuracy']:.3f}  delta_max {s['delta_max']:.3f}  "
            f"psc {s['psc']:.4f}  support {_support(s)}  final loss {s['final_loss']:.4f}  "
            f"({s['wall_seconds']:.1f}s per run)",
        ]
    )


def seeds_report(base, seeds: list[int], summaries: list[dict]) -> str:
    """K seeds: one line per seed, then per phase the mean and 95% interval across seeds."""
    per_seed = common.table(
        ["seed", "phases", "mean acc", "delta_max", "psc", "support", "final loss"],
        [
            [
                seed,
                common.sparkline(s["phase_accuracy"]),
                s["mean_accuracy"],
                s["delta_max"],
                s["psc"],
                _support(s),
                s["final_loss"],
            ]
            for seed, s in zip(seeds, summaries, strict=True)
        ],
    )
    across = common.across_seeds(base, summaries)
    phase = across["phase_accuracy"]
    rows = [
        [j, mean, "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"]
        for j, (mean, ci) in enumerate(zip(phase["mean"], phase["ci"], strict=True))
    ]
    return "\n".join(
        [
            _title(base, f"seeds {seeds[0]}..{seeds[-1]}"),
            per_seed,
            "",
            f"across {len(seeds)} seeds (mean, 95% interval)",
            common.table(["phase", "accuracy", "95% interval"], rows),
            f"mean accuracy {common.format_interval(across['mean_accuracy'])}  "
            f"delta_max {common.format_interval(across['delta_max'])}  "
            f"psc {common.format_interval(across['psc'], '.4f')}  "
            f"({summaries[0]['wall_seconds']:.1f}s per run)",
        ]
    )
