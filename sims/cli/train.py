"""`weakspots train`: train one model (or K seeds at once) and report per-phase accuracy."""

from __future__ import annotations

import argparse
import dataclasses

from weakspots.sims.train import stderr_progress, train_many

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train retrieval models with chunk-compressed keys",
        description="Train the idealized retrieval model; print per-phase accuracy.",
    )
    common.add_train_flags(parser)
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    base = common.train_config(args)
    seeds = common.seed_list(args)
    configs = [base.replace(seed=s) for s in seeds]
    progress = stderr_progress("train") if common.progress_enabled(args) else None
    summaries = [r.summary() for r in train_many(configs, progress=progress)]
    if args.json:
        common.print_json(json_report(base, seeds, summaries, many=args.seeds is not None))
    else:
        print(text_report(base, seeds, summaries))
    return 0


def json_report(base, seeds: list[int], summaries: list[dict], *, many: bool) -> dict:
    """`config` plus each metric: a value per run (a list over seeds when `many`)."""
    out = {"config": dataclasses.asdict(base)}
    if many:
        out["seeds"] = seeds
    for key in summaries[0]:
        values = [s[key] for s in summaries]
        out[key] = values if many else values[0]
    return out


def text_report(base, seeds: list[int], summaries: list[dict]) -> str:
    blocks = []
    for seed, s in zip(seeds, summaries, strict=True):
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
        title = (
            f"s={base.stride} N={base.chunks} d={base.dim} H={base.heads} gain={base.gain:g} "
            f"{base.operator} {base.loss} {base.optimizer} lr={base.lr:g} steps={base.steps} seed={seed}"
        )
        support = "-" if s["support_size"] is None else ",".join(map(str, s["support_size"]))
        blocks.append(
            "\n".join(
                [
                    title,
                    common.table(headers, rows),
                    f"phase accuracy {common.sparkline(s['phase_accuracy'])}  "
                    f"mean {s['mean_accuracy']:.3f}  delta_max {s['delta_max']:.3f}  "
                    f"psc {s['psc']:.4f}  support {support}  final loss {s['final_loss']:.4f}  "
                    f"({s['wall_seconds']:.1f}s)",
                ]
            )
        )
    return "\n\n".join(blocks)
